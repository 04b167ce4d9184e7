//! First-start setup, safe to run on every start.
//!
//! Each step creates its entity only when it is missing: a system administrator, a tenant "Tenant" (with
//! its default device profile) and a tenant administrator; with `demo`, ThingsBoard's demo accounts
//! (`sysadmin@thingsboard.org` / `sysadmin`, `tenant@thingsboard.org` / `tenant`), which ThingsBoard's own
//! tools log in with, and a "Demo Device" with access token `DEMO_TOKEN`. Existing users keep their
//! passwords: the configured ones apply only when the user is created.

use uuid::Uuid;

use crate::password::random_alphanumeric;
use crate::{Authority, CredentialsDraft, DeviceDraft, Entities, EntityError, NewUser};

pub const DEMO_SYSADMIN_EMAIL: &str = "sysadmin@thingsboard.org";
pub const DEMO_SYSADMIN_PASSWORD: &str = "sysadmin";
pub const DEMO_TENANT_ADMIN_EMAIL: &str = "tenant@thingsboard.org";
pub const DEMO_TENANT_ADMIN_PASSWORD: &str = "tenant";
pub const DEMO_DEVICE_NAME: &str = "Demo Device";
pub const DEMO_DEVICE_TOKEN: &str = "DEMO_TOKEN";
pub const TENANT_TITLE: &str = "Tenant";

/// Mirrors the server's `[bootstrap]` config section. Empty passwords are generated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapSpec {
    pub sysadmin_email: String,
    pub tenant_admin_email: String,
    pub sysadmin_password: String,
    pub tenant_admin_password: String,
    pub demo: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoDevice {
    pub id: Uuid,
    pub name: String,
    pub access_token: String,
    /// False when it already existed.
    pub created: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BootstrapReport {
    /// The tenant the tenant admin (and the demo data) belongs to.
    pub tenant_id: Uuid,
    /// Emails of the users created by this run.
    pub created_users: Vec<String>,
    /// `(email, password)` of each password made up by this run: print them once, they are stored only
    /// as hashes.
    pub generated_passwords: Vec<(String, String)>,
    /// With `demo`: the demo device (created now or before).
    pub demo: Option<DemoDevice>,
}

impl Entities {
    /// Creates whatever of the first-start entities is missing; see the module docs.
    pub fn bootstrap(&self, spec: &BootstrapSpec) -> Result<BootstrapReport, EntityError> {
        let mut report = BootstrapReport::default();
        if self.users_with_authority(Authority::SysAdmin)?.is_empty() {
            let password =
                self.initial_password(&spec.sysadmin_email, &spec.sysadmin_password, &mut report);
            self.create_user(&NewUser::sysadmin(&spec.sysadmin_email, &password))?;
            report.created_users.push(spec.sysadmin_email.clone());
        }
        let tenant = match self.tenants()?.into_iter().next() {
            Some(tenant) => tenant,
            None => self.create_tenant(TENANT_TITLE)?,
        };
        report.tenant_id = tenant.id;
        let has_admin = self
            .users_with_authority(Authority::TenantAdmin)?
            .iter()
            .any(|u| u.tenant_id == tenant.id);
        if !has_admin {
            let password = self.initial_password(
                &spec.tenant_admin_email,
                &spec.tenant_admin_password,
                &mut report,
            );
            self.create_user(&NewUser::tenant_admin(
                tenant.id,
                &spec.tenant_admin_email,
                &password,
            ))?;
            report.created_users.push(spec.tenant_admin_email.clone());
        }
        if !spec.demo {
            return Ok(report);
        }
        let demo_users = [
            NewUser::sysadmin(DEMO_SYSADMIN_EMAIL, DEMO_SYSADMIN_PASSWORD),
            NewUser::tenant_admin(
                tenant.id,
                DEMO_TENANT_ADMIN_EMAIL,
                DEMO_TENANT_ADMIN_PASSWORD,
            ),
        ];
        for user in demo_users {
            if self.user_by_email(&user.email)?.is_none() {
                self.create_user(&user)?;
                report.created_users.push(user.email);
            }
        }
        report.demo = self.demo_device(tenant.id)?;
        Ok(report)
    }

    fn initial_password(
        &self,
        email: &str,
        configured: &str,
        report: &mut BootstrapReport,
    ) -> String {
        if !configured.is_empty() {
            return configured.to_string();
        }
        let password = random_alphanumeric(16);
        report
            .generated_passwords
            .push((email.to_string(), password.clone()));
        password
    }

    /// The demo device, created if absent. If its token is taken by another device, the demo device is
    /// not created (a warning is logged) rather than failing the start.
    fn demo_device(&self, tenant_id: Uuid) -> Result<Option<DemoDevice>, EntityError> {
        if let Some(device) = self.device_by_name(tenant_id, DEMO_DEVICE_NAME)? {
            let token = self
                .device_credentials(device.id)?
                .map(|c| c.credentials_id)
                .unwrap_or_default();
            return Ok(Some(DemoDevice {
                id: device.id,
                name: device.name,
                access_token: token,
                created: false,
            }));
        }
        let created = self.save_device(
            tenant_id,
            &DeviceDraft::named(DEMO_DEVICE_NAME),
            Some(&CredentialsDraft::access_token(DEMO_DEVICE_TOKEN)),
        );
        match created {
            Ok(device) => Ok(Some(DemoDevice {
                id: device.id,
                name: device.name,
                access_token: DEMO_DEVICE_TOKEN.to_string(),
                created: true,
            })),
            Err(EntityError::AlreadyExists(reason)) => {
                tracing::warn!(%reason, "demo device not created: its access token {DEMO_DEVICE_TOKEN} is taken");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(demo: bool) -> BootstrapSpec {
        BootstrapSpec {
            sysadmin_email: "sysadmin@fleetwire.local".into(),
            tenant_admin_email: "tenant@fleetwire.local".into(),
            sysadmin_password: String::new(),
            tenant_admin_password: "configured".into(),
            demo,
        }
    }

    #[test]
    fn first_start_then_idempotent() {
        let e = Entities::open_in_memory().unwrap();
        let report = e.bootstrap(&spec(false)).unwrap();
        assert_eq!(
            report.created_users,
            ["sysadmin@fleetwire.local", "tenant@fleetwire.local"]
        );
        assert_eq!(
            report.generated_passwords.len(),
            1,
            "only the empty password is generated"
        );
        let (email, password) = &report.generated_passwords[0];
        assert_eq!(email, "sysadmin@fleetwire.local");
        let admin = e.check_password(email, password).unwrap().unwrap();
        assert_eq!(admin.authority, Authority::SysAdmin);
        let tenant_admin = e
            .check_password("tenant@fleetwire.local", "configured")
            .unwrap()
            .unwrap();
        assert_eq!(tenant_admin.tenant_id, report.tenant_id);
        assert_eq!(e.tenant(report.tenant_id).unwrap().unwrap().title, "Tenant");
        assert!(e
            .default_device_profile(report.tenant_id)
            .unwrap()
            .is_some());
        assert!(report.demo.is_none());
        assert!(e.user_by_email(DEMO_TENANT_ADMIN_EMAIL).unwrap().is_none());

        let again = e.bootstrap(&spec(false)).unwrap();
        assert_eq!(again.tenant_id, report.tenant_id);
        assert!(again.created_users.is_empty());
        assert!(again.generated_passwords.is_empty());
        assert_eq!(e.tenants().unwrap().len(), 1);
        // The password set at creation stays.
        assert!(e.check_password(email, password).unwrap().is_some());
    }

    #[test]
    fn demo_accounts_and_device() {
        let e = Entities::open_in_memory().unwrap();
        e.bootstrap(&spec(false)).unwrap();
        let report = e.bootstrap(&spec(true)).unwrap();
        assert_eq!(
            report.created_users,
            [DEMO_SYSADMIN_EMAIL, DEMO_TENANT_ADMIN_EMAIL]
        );
        let tenant = e
            .check_password(DEMO_TENANT_ADMIN_EMAIL, "tenant")
            .unwrap()
            .unwrap();
        assert_eq!(
            (tenant.authority, tenant.tenant_id),
            (Authority::TenantAdmin, report.tenant_id)
        );
        let sys = e
            .check_password(DEMO_SYSADMIN_EMAIL, "sysadmin")
            .unwrap()
            .unwrap();
        assert_eq!(sys.authority, Authority::SysAdmin);
        let demo = report.demo.unwrap();
        assert!(demo.created);
        assert_eq!(demo.access_token, DEMO_DEVICE_TOKEN);
        let auth = e.device_by_access_token(DEMO_DEVICE_TOKEN).unwrap();
        assert_eq!(
            (auth.device_id, auth.name.as_str()),
            (demo.id, DEMO_DEVICE_NAME)
        );

        let again = e.bootstrap(&spec(true)).unwrap();
        assert!(again.created_users.is_empty());
        let demo_again = again.demo.unwrap();
        assert_eq!((demo_again.id, demo_again.created), (demo.id, false));
        assert_eq!(demo_again.access_token, DEMO_DEVICE_TOKEN);
    }

    #[test]
    fn demo_emails_may_equal_configured_ones() {
        let e = Entities::open_in_memory().unwrap();
        let s = BootstrapSpec {
            tenant_admin_email: DEMO_TENANT_ADMIN_EMAIL.into(),
            tenant_admin_password: "tenant".into(),
            ..spec(true)
        };
        let report = e.bootstrap(&s).unwrap();
        assert_eq!(
            report.created_users,
            [
                "sysadmin@fleetwire.local",
                DEMO_TENANT_ADMIN_EMAIL,
                DEMO_SYSADMIN_EMAIL
            ]
        );
    }
}
