//! The operator: who may act. Without a configured token nobody may (read-only). With one, an
//! operator logs in by giving the token, compared in constant time; the answer is a session
//! cookie signed with a key derived from the token, and every form carries a CSRF token derived
//! from the session, checked on every POST. Hand-written on `hmac`/`sha2`/`subtle` rather than
//! a session crate: the dashboard keeps no server-side state, and these few lines are all a
//! signed cookie and a session-bound token need.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "job_operator";

/// How long a login lasts.
const SESSION_SECS: u64 = 12 * 3600;

/// The configured operator token, and the key its sessions are signed with.
#[derive(Clone)]
pub(crate) struct Operator {
    token_digest: [u8; 32],
    key: [u8; 32],
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Operator(<redacted>)")
    }
}

/// A logged-in operator's session: its nonce, which the CSRF token is derived from.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    nonce: String,
}

impl Operator {
    pub(crate) fn new(token: &str) -> Operator {
        let token_digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let key: [u8; 32] = Sha256::new()
            .chain_update(b"job-web session key\0")
            .chain_update(token.as_bytes())
            .finalize()
            .into();
        Operator { token_digest, key }
    }

    /// Whether `given` is the token, in time independent of where they differ (both are hashed
    /// first, so not of their lengths either).
    pub(crate) fn accepts(&self, given: &str) -> bool {
        let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        given.ct_eq(&self.token_digest).into()
    }

    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// A new session's cookie value: `nonce.issued.signature`.
    pub(crate) fn new_session(&self) -> String {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let issued = now().to_string();
        let sig = self.mac(&[b"session", nonce.as_bytes(), issued.as_bytes()]);
        format!(
            "{nonce}.{issued}.{}",
            hex::encode(sig.finalize().into_bytes())
        )
    }

    /// The session the request's cookie proves, if it is signed by this token and not expired.
    pub(crate) fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let value = cookie(headers, COOKIE)?;
        let mut parts = value.split('.');
        let (nonce, issued, sig) = (parts.next()?, parts.next()?, parts.next()?);
        let sig = hex::decode(sig).ok()?;
        self.mac(&[b"session", nonce.as_bytes(), issued.as_bytes()])
            .verify_slice(&sig)
            .ok()?;
        let issued: u64 = issued.parse().ok()?;
        (now().saturating_sub(issued) < SESSION_SECS).then(|| Session {
            nonce: nonce.to_owned(),
        })
    }

    /// The CSRF token of `session`, put in every form.
    pub(crate) fn csrf(&self, session: &Session) -> String {
        hex::encode(
            self.mac(&[b"csrf", session.nonce.as_bytes()])
                .finalize()
                .into_bytes(),
        )
    }

    /// Whether `given` is `session`'s CSRF token (compared in constant time).
    pub(crate) fn csrf_matches(&self, session: &Session, given: &str) -> bool {
        match hex::decode(given) {
            Ok(given) => self
                .mac(&[b"csrf", session.nonce.as_bytes()])
                .verify_slice(&given)
                .is_ok(),
            Err(_) => false,
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            axum::http::header::COOKIE,
            format!("other=1; {COOKIE}={value}").parse().unwrap(),
        );
        headers
    }

    #[test]
    fn accepts_only_the_token() {
        let op = Operator::new("s3cret");
        assert!(op.accepts("s3cret"));
        assert!(!op.accepts("s3cre"));
        assert!(!op.accepts(""));
    }

    #[test]
    fn a_session_signed_by_another_token_is_refused() {
        let op = Operator::new("s3cret");
        let cookie = Operator::new("other").new_session();
        assert!(op.session(&with_cookie(&cookie)).is_none());
        let mine = op.new_session();
        assert!(op.session(&with_cookie(&mine)).is_some());
        let forged = format!("{}x", &mine[..mine.len() - 1]);
        assert!(op.session(&with_cookie(&forged)).is_none());
    }

    #[test]
    fn csrf_tokens_are_bound_to_their_session() {
        let op = Operator::new("s3cret");
        let a = op.session(&with_cookie(&op.new_session())).unwrap();
        let b = op.session(&with_cookie(&op.new_session())).unwrap();
        assert!(op.csrf_matches(&a, &op.csrf(&a)));
        assert!(!op.csrf_matches(&b, &op.csrf(&a)));
        assert!(!op.csrf_matches(&a, ""));
    }
}
