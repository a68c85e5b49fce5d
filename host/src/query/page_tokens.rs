//! `next_token`s of result pages: a page's cursor (row, byte offset) signed
//! with the replicas' shared link key and the query's id, so a token works on
//! any replica, for its own query only, and cannot be forged or moved.

use super::{QueryError, result::PageCursor};
use crate::lake::signing::LinkSigner;

/// Signature characters a token carries.
const SIGNATURE_CHARS: usize = 32;

pub struct PageTokens {
    signer: LinkSigner,
}

impl PageTokens {
    pub fn new(signer: LinkSigner) -> Self {
        Self { signer }
    }

    /// `row.offset.signature`.
    pub fn token(&self, id: &str, cursor: PageCursor) -> String {
        let (row, offset) = (cursor.row.to_string(), cursor.offset.to_string());
        let signature = self.signer.sign("page", &[id, &row, &offset]);
        format!("{row}.{offset}.{}", &signature[..SIGNATURE_CHARS])
    }

    /// The cursor of a token this service issued for query `id`.
    pub fn cursor(&self, id: &str, token: &str) -> Result<PageCursor, QueryError> {
        let mut parts = token.splitn(3, '.');
        let (Some(row), Some(offset), Some(signature)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(QueryError::BadPageToken);
        };
        let full = self.signer.sign("page", &[id, row, offset]);
        let matches = signature.len() == SIGNATURE_CHARS
            && bool::from(subtle::ConstantTimeEq::ct_eq(
                &full.as_bytes()[..SIGNATURE_CHARS],
                signature.as_bytes(),
            ));
        if !matches {
            return Err(QueryError::BadPageToken);
        }
        Ok(PageCursor {
            row: row.parse().map_err(|_| QueryError::BadPageToken)?,
            offset: offset.parse().map_err(|_| QueryError::BadPageToken)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> PageTokens {
        PageTokens::new(LinkSigner::new(b"a key of the replicas, long enough"))
    }

    #[test]
    fn a_token_reads_back_for_its_own_query_only() {
        let tokens = tokens();
        let cursor = PageCursor {
            row: 1000,
            offset: 65_536,
        };
        let token = tokens.token("q1", cursor);
        let back = tokens.cursor("q1", &token).unwrap();
        assert_eq!((back.row, back.offset), (1000, 65_536));
        assert_eq!(tokens.cursor("q2", &token), Err(QueryError::BadPageToken));
        let other_key = PageTokens::new(LinkSigner::new(b"another key, just as long as it"));
        assert_eq!(
            other_key.cursor("q1", &token),
            Err(QueryError::BadPageToken)
        );
    }

    #[test]
    fn moved_or_malformed_tokens_are_refused() {
        let tokens = tokens();
        let token = tokens.token(
            "q1",
            PageCursor {
                row: 1000,
                offset: 10,
            },
        );
        let signature = token.rsplit('.').next().unwrap();
        for bad in [
            String::new(),
            "1000.10".into(),
            format!("2000.10.{signature}"),
            format!("1000.11.{signature}"),
            format!("1000.10.{}", &signature[..31]),
            format!("x.10.{signature}"),
        ] {
            assert_eq!(
                tokens.cursor("q1", &bad),
                Err(QueryError::BadPageToken),
                "{bad}"
            );
        }
    }
}
