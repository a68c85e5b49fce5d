//! Who is calling: OIDC discovery, the per-realm JWKS cache, access-token
//! validation (RFC 8725), the claims handlers read, the lake caller, the role capability table
//! and the security metadata built from them.
//!
//! `authenticate.rs` is the one door of every front end: credentials in,
//! the caller or a typed refusal out. Nothing here knows HTTP routing,
//! status codes or SQLSTATEs; each front end maps a refusal to its own once.

pub mod authenticate;
pub mod caller;
pub mod claims;
pub mod client_credentials;
pub mod failure_budget;
pub mod jwks;
pub mod roles;
pub mod security_metadata;
pub mod validator;

pub use authenticate::{Api, Authenticated, Credentials, Refusal, Verified, authenticate};
pub use caller::{AccessGrant, LakeCaller};
pub use claims::{AccessClaims, ClaimError};
pub use roles::{Access, DatabaseKind, Role, ServiceClientScope};
pub use validator::{TokenError, TokenValidator};
