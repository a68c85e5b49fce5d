//! HMAC-SHA256 signatures for links and tokens the server hands out and later
//! accepts without a bearer token (signed CSV links, result page tokens).
//!
//! The key is shared by every replica through the metadata store. Each
//! signature covers a purpose tag and length-prefixed fields, so a signature
//! made for one purpose or field split never verifies for another.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

type HmacSha256 = Hmac<Sha256>;

#[derive(Clone)]
pub struct LinkSigner {
    key: Vec<u8>,
}

impl std::fmt::Debug for LinkSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkSigner(..)")
    }
}

impl LinkSigner {
    pub fn new(key: &[u8]) -> Self {
        Self { key: key.to_vec() }
    }

    /// A fresh random key, hex encoded (stored once in the metadata store).
    pub fn generate_key() -> String {
        use rand::RngCore as _;
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        hex::encode(key)
    }

    /// Hex HMAC of `purpose` and `fields`.
    pub fn sign(&self, purpose: &str, fields: &[&str]) -> String {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        for part in std::iter::once(purpose).chain(fields.iter().copied()) {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        hex::encode(mac.finalize().into_bytes())
    }

    /// Constant-time check of a signature made by `sign`.
    pub fn verify(&self, purpose: &str, fields: &[&str], signature: &str) -> bool {
        let expected = self.sign(purpose, fields);
        expected.len() == signature.len()
            && bool::from(expected.as_bytes().ct_eq(signature.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_bind_purpose_fields_and_key() {
        let signer = LinkSigner::new(b"key-1");
        let sig = signer.sign("csv", &["q1", "100"]);
        assert!(signer.verify("csv", &["q1", "100"], &sig));
        assert!(!signer.verify("page", &["q1", "100"], &sig));
        assert!(!signer.verify("csv", &["q1", "101"], &sig));
        assert!(!signer.verify("csv", &["q11", "00"], &sig), "field split");
        assert!(!LinkSigner::new(b"key-2").verify("csv", &["q1", "100"], &sig));
        assert!(!signer.verify("csv", &["q1", "100"], &sig[..10]));
    }
}
