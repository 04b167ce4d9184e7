//! Users and their authorities. Passwords are stored only as argon2 hashes.

use rusqlite::{params, OptionalExtension, Row};
use serde_json::Value;
use uuid::Uuid;

use crate::password::{hash_password, verify_password};
use crate::sql::{self, now_ms};
use crate::{Entities, EntityError, NULL_UUID};

/// ThingsBoard's authorities (the `scopes` claim of a token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Authority {
    SysAdmin,
    TenantAdmin,
    CustomerUser,
}

impl Authority {
    pub fn as_str(self) -> &'static str {
        match self {
            Authority::SysAdmin => "SYS_ADMIN",
            Authority::TenantAdmin => "TENANT_ADMIN",
            Authority::CustomerUser => "CUSTOMER_USER",
        }
    }

    pub fn parse(text: &str) -> Option<Authority> {
        match text {
            "SYS_ADMIN" => Some(Authority::SysAdmin),
            "TENANT_ADMIN" => Some(Authority::TenantAdmin),
            "CUSTOMER_USER" => Some(Authority::CustomerUser),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub id: Uuid,
    pub created_time: i64,
    /// NULL_UUID for the system administrator.
    pub tenant_id: Uuid,
    /// NULL_UUID unless a customer user.
    pub customer_id: Uuid,
    pub email: String,
    pub authority: Authority,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub enabled: bool,
    pub additional_info: Option<Value>,
}

/// A user to create; `password` is hashed before it is stored.
#[derive(Debug, Clone)]
pub struct NewUser {
    pub tenant_id: Uuid,
    pub customer_id: Uuid,
    pub email: String,
    pub authority: Authority,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub password: String,
}

impl NewUser {
    pub fn sysadmin(email: &str, password: &str) -> NewUser {
        NewUser {
            tenant_id: NULL_UUID,
            customer_id: NULL_UUID,
            email: email.to_string(),
            authority: Authority::SysAdmin,
            first_name: None,
            last_name: None,
            password: password.to_string(),
        }
    }

    pub fn tenant_admin(tenant_id: Uuid, email: &str, password: &str) -> NewUser {
        NewUser {
            tenant_id,
            authority: Authority::TenantAdmin,
            ..NewUser::sysadmin(email, password)
        }
    }
}

const COLUMNS: &str =
    "id, created_time, tenant_id, customer_id, email, authority, first_name, last_name, \
                       enabled, additional_info";

fn from_row(row: &Row) -> rusqlite::Result<User> {
    let authority: String = row.get(5)?;
    Ok(User {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        tenant_id: sql::uuid(row, 2)?,
        customer_id: sql::uuid(row, 3)?,
        email: row.get(4)?,
        authority: Authority::parse(&authority).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                5,
                rusqlite::types::Type::Text,
                format!("unknown authority {authority}").into(),
            )
        })?,
        first_name: row.get(6)?,
        last_name: row.get(7)?,
        enabled: row.get(8)?,
        additional_info: sql::opt_json(row, 9)?,
    })
}

/// A hash of nothing in particular, computed once, for [`Entities::check_password`] on unknown emails.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("no such user").unwrap_or_default())
}

fn valid_email(email: &str) -> bool {
    let mut parts = email.split('@');
    matches!((parts.next(), parts.next(), parts.next()),
        (Some(local), Some(domain), None) if !local.is_empty() && !domain.is_empty() && !email.contains(char::is_whitespace))
}

impl Entities {
    /// Creates a user. Emails are unique, compared case-insensitively.
    pub fn create_user(&self, new: &NewUser) -> Result<User, EntityError> {
        if !valid_email(&new.email) {
            return Err(EntityError::Invalid(format!(
                "Invalid email address format '{}'!",
                new.email
            )));
        }
        // Hash outside the connection lock: it takes tens of milliseconds.
        let hash = hash_password(&new.password)?;
        let user = User {
            id: Uuid::new_v4(),
            created_time: now_ms(),
            tenant_id: new.tenant_id,
            customer_id: new.customer_id,
            email: new.email.clone(),
            authority: new.authority,
            first_name: new.first_name.clone(),
            last_name: new.last_name.clone(),
            enabled: true,
            additional_info: None,
        };
        self.with_conn(|conn| {
            let inserted = conn.execute(
                "INSERT INTO tb_user (id, created_time, tenant_id, customer_id, email, authority, first_name,
                     last_name, enabled, password_hash, additional_info)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?9, NULL)",
                params![
                    user.id.to_string(),
                    user.created_time,
                    user.tenant_id.to_string(),
                    user.customer_id.to_string(),
                    user.email,
                    user.authority.as_str(),
                    user.first_name,
                    user.last_name,
                    hash
                ],
            );
            match inserted {
                Err(e) if sql::is_unique_violation(&e) => Err(EntityError::AlreadyExists(format!(
                    "User with email '{}' already present in database!",
                    user.email
                ))),
                other => other.map(|_| ()).map_err(EntityError::from),
            }
        })?;
        Ok(user)
    }

    pub fn user(&self, id: Uuid) -> Result<Option<User>, EntityError> {
        self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {COLUMNS} FROM tb_user WHERE id = ?1"),
                    [id.to_string()],
                    from_row,
                )
                .optional()?)
        })
    }

    pub fn user_by_email(&self, email: &str) -> Result<Option<User>, EntityError> {
        self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {COLUMNS} FROM tb_user WHERE email = ?1 COLLATE NOCASE"),
                    [email],
                    from_row,
                )
                .optional()?)
        })
    }

    /// The users of one authority (all tenants), oldest first.
    pub fn users_with_authority(&self, authority: Authority) -> Result<Vec<User>, EntityError> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLUMNS} FROM tb_user WHERE authority = ?1 ORDER BY created_time, rowid"
            ))?;
            let rows = stmt.query_map([authority.as_str()], from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// The user with this email if `password` is theirs; `None` for an unknown email or a wrong password
    /// (the caller cannot tell which, as in ThingsBoard). Disabled users are returned: the caller decides.
    pub fn check_password(&self, email: &str, password: &str) -> Result<Option<User>, EntityError> {
        let found = self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {COLUMNS}, password_hash FROM tb_user WHERE email = ?1 COLLATE NOCASE"),
                    [email],
                    |row| Ok((from_row(row)?, row.get::<_, String>(10)?)),
                )
                .optional()?)
        })?;
        // Verify outside the connection lock: argon2 is deliberately slow. An unknown email is checked
        // against a dummy hash so that it takes as long as a wrong password (no email probing by timing).
        match found {
            Some((user, hash)) => Ok(verify_password(password, &hash).then_some(user)),
            None => {
                verify_password(password, dummy_hash());
                Ok(None)
            }
        }
    }

    /// Replaces a user's password.
    pub fn set_password(&self, user_id: Uuid, password: &str) -> Result<(), EntityError> {
        let hash = hash_password(password)?;
        let changed = self.with_conn(|conn| {
            Ok(conn.execute(
                "UPDATE tb_user SET password_hash = ?1 WHERE id = ?2",
                params![hash, user_id.to_string()],
            )?)
        })?;
        if changed == 0 {
            return Err(EntityError::not_found("User", user_id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_and_check_password() {
        let e = Entities::open_in_memory().unwrap();
        let t = e.create_tenant("T").unwrap();
        let u = e
            .create_user(&NewUser::tenant_admin(t.id, "Admin@Example.com", "secret"))
            .unwrap();
        assert_eq!(u.authority, Authority::TenantAdmin);
        assert_eq!(e.user(u.id).unwrap(), Some(u.clone()));
        // Emails compare case-insensitively, for login and for uniqueness.
        assert_eq!(
            e.check_password("admin@example.com", "secret").unwrap(),
            Some(u.clone())
        );
        assert_eq!(
            e.check_password("admin@example.com", "wrong").unwrap(),
            None
        );
        assert_eq!(
            e.check_password("nobody@example.com", "secret").unwrap(),
            None
        );
        let dup = e
            .create_user(&NewUser::sysadmin("ADMIN@example.com", "x"))
            .unwrap_err();
        assert!(matches!(dup, EntityError::AlreadyExists(_)), "{dup}");
        e.set_password(u.id, "new").unwrap();
        assert!(e
            .check_password("admin@example.com", "secret")
            .unwrap()
            .is_none());
        assert!(e
            .check_password("admin@example.com", "new")
            .unwrap()
            .is_some());
    }

    #[test]
    fn rejects_bad_email() {
        let e = Entities::open_in_memory().unwrap();
        for bad in ["", "x", "@x", "x@", "a b@c", "a@b@c"] {
            assert!(
                e.create_user(&NewUser::sysadmin(bad, "p")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn authority_round_trip() {
        for a in [
            Authority::SysAdmin,
            Authority::TenantAdmin,
            Authority::CustomerUser,
        ] {
            assert_eq!(Authority::parse(a.as_str()), Some(a));
        }
        assert_eq!(Authority::parse("REFRESH_TOKEN"), None);
    }
}
