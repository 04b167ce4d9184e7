//! Users created by an administrator (reference 4.9's customer-user flow): the user exists at once but cannot
//! log in until it is activated with the token of its activation link, which sets its password. The token is
//! single-use. Also the customer's users, and deleting one.

use rusqlite::{params, OptionalExtension};
use uuid::Uuid;

use crate::password::random_alphanumeric;
use crate::sql::{self, now_ms};
use crate::user::{Authority, NewUser, User};
use crate::{Entities, EntityError, PageData, PageQuery};

/// Length of an activation token (ThingsBoard's are 30 characters).
const TOKEN_LEN: usize = 30;

impl Entities {
    /// Creates a user that must be activated before it can log in, and its activation token.
    pub fn create_user_to_activate(
        &self,
        tenant_id: Uuid,
        customer_id: Uuid,
        email: &str,
        authority: Authority,
        first_name: Option<String>,
        last_name: Option<String>,
    ) -> Result<(User, String), EntityError> {
        // A password nobody knows until activation replaces it.
        let user = self.create_user(&NewUser {
            tenant_id,
            customer_id,
            email: email.to_string(),
            authority,
            first_name,
            last_name,
            password: random_alphanumeric(32),
        })?;
        let token = random_alphanumeric(TOKEN_LEN);
        self.with_conn(|conn| {
            conn.execute(
                "INSERT INTO user_activation (token, user_id, created_time) VALUES (?1, ?2, ?3)",
                params![token, user.id.to_string(), now_ms()],
            )?;
            Ok(())
        })?;
        Ok((user, token))
    }

    /// The activation token of a user not activated yet.
    pub fn activation_token(&self, user_id: Uuid) -> Result<Option<String>, EntityError> {
        self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    "SELECT token FROM user_activation WHERE user_id = ?1",
                    [user_id.to_string()],
                    |r| r.get(0),
                )
                .optional()?)
        })
    }

    /// Activates the user of `token` with `password`; the token is used up. NotFound for an unknown token.
    /// One transaction: of two racing activations with the same token, one wins.
    pub fn activate_user(&self, token: &str, password: &str) -> Result<User, EntityError> {
        let hash = crate::password::hash_password(password)?;
        let user_id = self.with_conn(|conn| {
            let tx = conn.transaction()?;
            let id: Option<String> = tx
                .query_row(
                    "SELECT user_id FROM user_activation WHERE token = ?1",
                    [token],
                    |r| r.get(0),
                )
                .optional()?;
            let id = id.ok_or_else(|| {
                EntityError::NotFound("Unable to find user credentials by activateToken".into())
            })?;
            tx.execute("DELETE FROM user_activation WHERE token = ?1", [token])?;
            let changed = tx.execute(
                "UPDATE tb_user SET password_hash = ?1 WHERE id = ?2",
                params![hash, id],
            )?;
            if changed == 0 {
                return Err(EntityError::NotFound(format!(
                    "User with id [{id}] is not found"
                )));
            }
            tx.commit()?;
            Ok(id)
        })?;
        let user_id = Uuid::parse_str(&user_id).map_err(|e| EntityError::Corrupt {
            table: "user_activation",
            id: user_id.clone(),
            reason: e.to_string(),
        })?;
        self.user(user_id)?
            .ok_or_else(|| EntityError::not_found("User", user_id))
    }

    /// Deletes a user of the tenant (not oneself: the caller checks).
    pub fn delete_user(&self, tenant_id: Uuid, user_id: Uuid) -> Result<(), EntityError> {
        self.with_conn(|conn| {
            let deleted = conn.execute(
                "DELETE FROM tb_user WHERE id = ?1 AND tenant_id = ?2",
                [user_id.to_string(), tenant_id.to_string()],
            )?;
            if deleted == 0 {
                return Err(EntityError::not_found("User", user_id));
            }
            conn.execute(
                "DELETE FROM user_activation WHERE user_id = ?1",
                [user_id.to_string()],
            )?;
            Ok(())
        })
    }

    /// A page of a customer's users, oldest first; text search on the email.
    pub fn customer_users(
        &self,
        customer_id: Uuid,
        query: &PageQuery,
    ) -> Result<PageData<User>, EntityError> {
        self.users_page("customer_id", customer_id, Authority::CustomerUser, query)
    }

    /// A page of a tenant's administrators (the system administrator's view), oldest first; text search on
    /// the email.
    pub fn tenant_admins(
        &self,
        tenant_id: Uuid,
        query: &PageQuery,
    ) -> Result<PageData<User>, EntityError> {
        self.users_page("tenant_id", tenant_id, Authority::TenantAdmin, query)
    }

    /// Users whose `owner_column` is `owner` and whose authority is `authority`.
    fn users_page(
        &self,
        owner_column: &str,
        owner: Uuid,
        authority: Authority,
        query: &PageQuery,
    ) -> Result<PageData<User>, EntityError> {
        let order = query.order_limit(
            &[
                ("createdTime", "created_time"),
                ("email", "email"),
                ("firstName", "first_name"),
                ("lastName", "last_name"),
            ],
            "created_time",
            "rowid",
        )?;
        let filter = format!(
            "{owner_column} = ?1 AND authority = ?3 \
             AND (?2 IS NULL OR instr(lower(email), lower(?2)) > 0)"
        );
        let args = params![owner.to_string(), query.search(), authority.as_str()];
        let ids: Vec<Uuid> = self.with_conn(|conn| {
            let mut stmt =
                conn.prepare(&format!("SELECT id FROM tb_user WHERE {filter} {order}"))?;
            let rows = stmt.query_map(args, |r| sql::uuid(r, 0))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        let total: u64 = self.with_conn(|conn| {
            Ok(conn.query_row(
                &format!("SELECT count(*) FROM tb_user WHERE {filter}"),
                args,
                |r| r.get(0),
            )?)
        })?;
        let mut users = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(user) = self.user(id)? {
                users.push(user);
            }
        }
        Ok(query.page_of(users, total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_sets_the_password_once() {
        let e = Entities::open_in_memory().unwrap();
        let tenant = e.create_tenant("T").unwrap().id;
        let customer = Uuid::new_v4();
        let (user, token) = e
            .create_user_to_activate(
                tenant,
                customer,
                "c@x.org",
                Authority::CustomerUser,
                None,
                None,
            )
            .unwrap();
        assert_eq!(
            e.activation_token(user.id).unwrap().as_deref(),
            Some(token.as_str())
        );
        assert_eq!(e.check_password("c@x.org", "secret-1").unwrap(), None);
        let activated = e.activate_user(&token, "secret-1").unwrap();
        assert_eq!(activated.id, user.id);
        assert_eq!(
            e.check_password("c@x.org", "secret-1")
                .unwrap()
                .map(|u| u.id),
            Some(user.id)
        );
        assert!(matches!(
            e.activate_user(&token, "again"),
            Err(EntityError::NotFound(_))
        ));
        assert_eq!(e.activation_token(user.id).unwrap(), None);

        let page = e.customer_users(customer, &PageQuery::new(10, 0)).unwrap();
        assert_eq!(
            page.data.iter().map(|u| u.id).collect::<Vec<_>>(),
            [user.id]
        );
        assert!(matches!(
            e.delete_user(Uuid::new_v4(), user.id),
            Err(EntityError::NotFound(_))
        ));
        e.delete_user(tenant, user.id).unwrap();
        assert_eq!(e.user(user.id).unwrap(), None);
    }
}
