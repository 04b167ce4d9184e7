//! Password hashing (argon2id, PHC string format) and random secrets.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::distr::Alphanumeric;
use rand::{Rng, RngCore};

use crate::EntityError;

/// Hashes `password` with argon2id and a random salt (default parameters: 19 MiB, 2 passes).
pub fn hash_password(password: &str) -> Result<String, EntityError> {
    let mut salt_bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut salt_bytes);
    let salt =
        SaltString::encode_b64(&salt_bytes).map_err(|e| EntityError::Password(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| EntityError::Password(e.to_string()))
}

/// True when `password` matches the stored `hash`; false for a mismatch or an unreadable hash.
pub fn verify_password(password: &str, hash: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// A random alphanumeric string (initial passwords, access tokens).
pub fn random_alphanumeric(len: usize) -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_then_verify() {
        let hash = hash_password("tenant").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password("tenant", &hash));
        assert!(!verify_password("Tenant", &hash));
        assert!(!verify_password("tenant", "not a hash"));
        // Salted: the same password hashes differently.
        assert_ne!(hash, hash_password("tenant").unwrap());
    }

    #[test]
    fn random_strings_have_the_length_and_alphabet() {
        let s = random_alphanumeric(20);
        assert_eq!(s.len(), 20);
        assert!(s.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(s, random_alphanumeric(20));
    }
}
