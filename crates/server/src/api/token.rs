//! JWTs: signing and verification, with ThingsBoard's claims.
//!
//! HS512 with issuer `thingsboard.io` (ThingsBoard's tools decode tokens without verifying, but read
//! `exp` and `iat`, so the tokens must be real JWTs with ThingsBoard's claim names). The secret comes from
//! the config, or is generated on first start and kept in `data_dir/jwt.secret` (mode 0600) so tokens
//! survive a restart.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use fleetwire_entities::User;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use parking_lot::Mutex;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::AuthConfig;

pub const ISSUER: &str = "thingsboard.io";
/// The `scopes` entry of a refresh token.
pub const REFRESH_SCOPE: &str = "REFRESH_TOKEN";
pub const SECRET_FILE: &str = "jwt.secret";

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("JWT secret file {path}: {source}")]
    SecretFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("JWT secret file {path} is empty")]
    EmptySecret { path: PathBuf },
    #[error("cannot sign a token: {0}")]
    Sign(String),
}

/// Why a token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    Expired,
    Invalid,
}

/// The claims of both token kinds; absent fields are omitted from the token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claims {
    /// The user's email.
    pub sub: String,
    pub user_id: String,
    /// The authority (`["TENANT_ADMIN"]`), or `["REFRESH_TOKEN"]`.
    pub scopes: Vec<String>,
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub is_public: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    pub iss: String,
    /// Seconds since the epoch.
    pub iat: u64,
    /// Seconds since the epoch.
    pub exp: u64,
}

impl Claims {
    pub fn is_refresh(&self) -> bool {
        self.scopes.iter().any(|s| s == REFRESH_SCOPE)
    }
}

/// `{"token","refreshToken"}` of a login or refresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenPair {
    pub token: String,
    pub refresh_token: String,
}

pub struct Auth {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    access_ttl_s: u64,
    refresh_ttl_s: u64,
    /// Sessions ended by a logout, with when their last token expires (then they are forgotten). In memory, as
    /// ThingsBoard's token-outdating cache: a restart forgets them.
    ended_sessions: Mutex<HashMap<String, u64>>,
}

pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Reads the stored secret, or creates it (64 random bytes, hex) readable by the owner only.
fn stored_secret(data_dir: &Path) -> Result<Vec<u8>, AuthError> {
    let path = data_dir.join(SECRET_FILE);
    let file_error = |source| AuthError::SecretFile {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().is_empty() => Err(AuthError::EmptySecret { path }),
        Ok(text) => Ok(text.trim().as_bytes().to_vec()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 64];
            rand::rng().fill_bytes(&mut bytes);
            let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&path).map_err(file_error)?;
            file.write_all(secret.as_bytes()).map_err(file_error)?;
            file.sync_all().map_err(file_error)?;
            Ok(secret.into_bytes())
        }
        Err(e) => Err(file_error(e)),
    }
}

impl Auth {
    /// The secret from `config.jwt_secret`, else from (or newly into) `data_dir/jwt.secret`.
    pub fn new(config: &AuthConfig, data_dir: &Path) -> Result<Auth, AuthError> {
        let secret = if config.jwt_secret.is_empty() {
            stored_secret(data_dir)?
        } else {
            config.jwt_secret.as_bytes().to_vec()
        };
        Ok(Auth::from_secret(
            &secret,
            config.access_token_ttl_s,
            config.refresh_token_ttl_s,
        ))
    }

    pub fn from_secret(secret: &[u8], access_ttl_s: u64, refresh_ttl_s: u64) -> Auth {
        let mut validation = Validation::new(Algorithm::HS512);
        validation.set_issuer(&[ISSUER]);
        validation.leeway = 0;
        Auth {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            access_ttl_s,
            refresh_ttl_s,
            ended_sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Ends a session (a logout): its access and refresh tokens are refused from now on.
    pub fn end_session(&self, session_id: &str, now_s: u64) {
        let mut ended = self.ended_sessions.lock();
        ended.retain(|_, until| *until > now_s);
        ended.insert(
            session_id.to_string(),
            now_s + self.access_ttl_s.max(self.refresh_ttl_s),
        );
    }

    /// A new access + refresh pair for `user` in a new session, issued at `now_s`.
    pub fn issue(&self, user: &User, now_s: u64) -> Result<TokenPair, AuthError> {
        self.issue_in_session(user, &Uuid::new_v4().to_string(), now_s)
    }

    /// A new pair in an existing session (token refresh keeps the session id).
    pub fn issue_in_session(
        &self,
        user: &User,
        session_id: &str,
        now_s: u64,
    ) -> Result<TokenPair, AuthError> {
        let access = Claims {
            sub: user.email.clone(),
            user_id: user.id.to_string(),
            scopes: vec![user.authority.as_str().to_string()],
            session_id: session_id.to_string(),
            first_name: user.first_name.clone(),
            last_name: user.last_name.clone(),
            enabled: Some(user.enabled),
            is_public: false,
            tenant_id: Some(user.tenant_id.to_string()),
            customer_id: Some(user.customer_id.to_string()),
            jti: None,
            iss: ISSUER.to_string(),
            iat: now_s,
            exp: now_s + self.access_ttl_s,
        };
        let refresh = Claims {
            sub: user.email.clone(),
            user_id: user.id.to_string(),
            scopes: vec![REFRESH_SCOPE.to_string()],
            session_id: session_id.to_string(),
            first_name: None,
            last_name: None,
            enabled: None,
            is_public: false,
            tenant_id: None,
            customer_id: None,
            jti: Some(Uuid::new_v4().to_string()),
            iss: ISSUER.to_string(),
            iat: now_s,
            exp: now_s + self.refresh_ttl_s,
        };
        Ok(TokenPair {
            token: self.sign(&access)?,
            refresh_token: self.sign(&refresh)?,
        })
    }

    fn sign(&self, claims: &Claims) -> Result<String, AuthError> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS512), claims, &self.encoding)
            .map_err(|e| AuthError::Sign(e.to_string()))
    }

    /// Verifies signature, issuer and expiry, and that the session was not ended by a logout (its tokens are
    /// then outdated: `Expired`, as ThingsBoard answers); the caller checks the token kind.
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map(|data| data.claims)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => TokenError::Expired,
                _ => TokenError::Invalid,
            })?;
        if self.ended_sessions.lock().contains_key(&claims.session_id) {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetwire_entities::{Authority, NULL_UUID};

    fn user() -> User {
        User {
            id: Uuid::new_v4(),
            created_time: 0,
            tenant_id: Uuid::new_v4(),
            customer_id: NULL_UUID,
            email: "tenant@thingsboard.org".into(),
            authority: Authority::TenantAdmin,
            first_name: None,
            last_name: None,
            enabled: true,
            additional_info: None,
        }
    }

    #[test]
    fn issue_and_verify() {
        let auth = Auth::from_secret(b"secret", 9000, 604800);
        let u = user();
        let now = now_s();
        let pair = auth.issue(&u, now).unwrap();
        let access = auth.verify(&pair.token).unwrap();
        assert_eq!(access.sub, u.email);
        assert_eq!(access.scopes, ["TENANT_ADMIN"]);
        assert_eq!(access.tenant_id, Some(u.tenant_id.to_string()));
        assert_eq!(access.customer_id, Some(NULL_UUID.to_string()));
        assert_eq!((access.iat, access.exp), (now, now + 9000));
        assert_eq!(access.iss, "thingsboard.io");
        assert!(!access.is_refresh());
        let refresh = auth.verify(&pair.refresh_token).unwrap();
        assert!(refresh.is_refresh());
        assert_eq!(refresh.exp, now + 604800);
        assert_eq!(refresh.session_id, access.session_id);
        // Header says HS512.
        let header = jsonwebtoken::decode_header(&pair.token).unwrap();
        assert_eq!(header.alg, Algorithm::HS512);
    }

    #[test]
    fn expired_and_forged_tokens() {
        let auth = Auth::from_secret(b"secret", 9000, 604800);
        let old = auth.issue(&user(), now_s() - 10_000).unwrap();
        assert_eq!(auth.verify(&old.token), Err(TokenError::Expired));
        assert!(auth.verify(&old.refresh_token).is_ok());
        let other = Auth::from_secret(b"other", 9000, 604800);
        let forged = other.issue(&user(), now_s()).unwrap();
        assert_eq!(auth.verify(&forged.token), Err(TokenError::Invalid));
        assert_eq!(auth.verify("garbage"), Err(TokenError::Invalid));
    }

    #[test]
    fn secret_is_generated_once_with_private_mode() {
        let dir = tempfile::tempdir().unwrap();
        let config = AuthConfig::default();
        let a = Auth::new(&config, dir.path()).unwrap();
        let pair = a.issue(&user(), now_s()).unwrap();
        let path = dir.path().join(SECRET_FILE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let b = Auth::new(&config, dir.path()).unwrap();
        assert!(b.verify(&pair.token).is_ok(), "the stored secret is reused");
        let configured = AuthConfig {
            jwt_secret: "from-config".into(),
            ..AuthConfig::default()
        };
        let c = Auth::new(&configured, dir.path()).unwrap();
        assert_eq!(c.verify(&pair.token), Err(TokenError::Invalid));
    }
}
