//! A bound on guessing the operator token, per client and overall.
//!
//! - A client (the peer's IP address; an IPv6 address by its /64, which one host holds whole)
//!   with [`FAILURES`] wrong logins within a minute has every login it makes refused (429, a
//!   right token too, or a guess could still tell) until its minute is over. Other clients log
//!   in meanwhile: one host guessing locks out only itself.
//! - All clients together: after [`ALL_FAILURES`] wrong logins within a minute, every login of
//!   every client is refused until that minute is over, a bound on guessing from many
//!   addresses at once.
//!
//! The peer address is what the server gives the router (`ConnectInfo<SocketAddr>`: `job web`
//! serves with it; an application mounting the router serves it with
//! `into_make_service_with_connect_info`). Without one, every login counts as one client, so
//! the per-client bound is the overall one. Behind reverse proxies, every login comes from the
//! nearest proxy's address unless `DashboardConfig::forwarded_hops` says how many of them append
//! to `X-Forwarded-For` ([`forwarded_client`]). Per dashboard router, in memory: at most [`CLIENTS`] clients are tracked
//! (those whose minute is over are forgotten first; past that, a new client is counted in the
//! overall bound only); no clock but the `Instant`s the caller passes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong logins one client may make within [`WINDOW`].
pub(crate) const FAILURES: u32 = 10;
/// Wrong logins all clients together may make within [`WINDOW`].
pub(crate) const ALL_FAILURES: u32 = 100;
/// The window wrong logins are counted in.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Clients tracked at most.
pub(crate) const CLIENTS: usize = 4096;

/// Who made a login: the client's address (IPv6: its /64), or unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Client {
    /// The server did not say (no `ConnectInfo`): every such login is one client.
    Unknown,
    /// An IPv4 address.
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6([u8; 8]),
}

impl Client {
    pub(crate) fn of(address: Option<IpAddr>) -> Client {
        match address.map(|a| a.to_canonical()) {
            None => Client::Unknown,
            Some(IpAddr::V4(a)) => Client::V4(a.octets()),
            Some(IpAddr::V6(a)) => {
                let mut prefix = [0u8; 8];
                prefix.copy_from_slice(&a.octets()[..8]);
                Client::V6(prefix)
            }
        }
    }
}

/// The client's address as `hops` trusted proxies recorded it: the `hops`th entry from the
/// right of the `X-Forwarded-For` list (every such header, in order, comma-separated), when the
/// list is that long and the entry is an IP address (a port or brackets around an IPv6 address
/// allowed); otherwise `None`, and the peer's address counts. Entries left of it were written
/// by whoever sent the request, and are not read.
pub(crate) fn forwarded_client(headers: &axum::http::HeaderMap, hops: u8) -> Option<IpAddr> {
    if hops == 0 {
        return None;
    }
    let mut entries: Vec<&str> = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        // A header that is not text: the list cannot be read, so trust none of it.
        let text = value.to_str().ok()?;
        entries.extend(text.split(',').map(str::trim));
    }
    let entry = *entries.iter().rev().nth(usize::from(hops) - 1)?;
    entry.parse::<IpAddr>().ok().or_else(|| {
        entry
            .parse::<std::net::SocketAddr>()
            .ok()
            .map(|a| a.ip())
            .or_else(|| entry.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
    })
}

/// Wrong logins in a window: when it started and how many.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    failures: u32,
}

impl Window {
    /// The window `now` is in, starting a new one when this one is over.
    fn at(&mut self, now: Instant) -> &mut Window {
        if now.saturating_duration_since(self.start) >= WINDOW {
            *self = Window {
                start: now,
                failures: 0,
            };
        }
        self
    }

    /// `Err(how long to wait)` while it holds `limit` wrong logins.
    fn admit(&mut self, now: Instant, limit: u32) -> Result<(), Duration> {
        let w = self.at(now);
        if w.failures >= limit {
            Err((w.start + WINDOW).saturating_duration_since(now))
        } else {
            Ok(())
        }
    }
}

#[derive(Debug)]
struct Counts {
    all: Window,
    clients: HashMap<Client, Window>,
}

/// The wrong logins of the current windows.
#[derive(Debug)]
pub(crate) struct LoginThrottle {
    counts: Mutex<Counts>,
}

impl LoginThrottle {
    pub(crate) fn new(now: Instant) -> LoginThrottle {
        LoginThrottle {
            counts: Mutex::new(Counts {
                all: Window {
                    start: now,
                    failures: 0,
                },
                clients: HashMap::new(),
            }),
        }
    }

    /// `Err(how long to wait)` while `client`'s window holds [`FAILURES`] wrong logins, or the
    /// overall one [`ALL_FAILURES`].
    pub(crate) fn admit(&self, client: Client, now: Instant) -> Result<(), Duration> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let all = counts.all.admit(now, ALL_FAILURES);
        let own = match counts.clients.get_mut(&client) {
            Some(window) => window.admit(now, FAILURES),
            None => Ok(()),
        };
        match (all, own) {
            (Err(a), Err(b)) => Err(a.max(b)),
            (Err(wait), _) | (_, Err(wait)) => Err(wait),
            _ => Ok(()),
        }
    }

    /// Counts a wrong login of `client`.
    pub(crate) fn failed(&self, client: Client, now: Instant) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let all = counts.all.at(now);
        all.failures = all.failures.saturating_add(1);
        let clients = &mut counts.clients;
        if !clients.contains_key(&client) && clients.len() >= CLIENTS {
            clients.retain(|_, w| now.saturating_duration_since(w.start) < WINDOW);
            if clients.len() >= CLIENTS {
                // Full of clients within their minute: this one counts in the overall bound.
                return;
            }
        }
        let window = clients.entry(client).or_insert(Window {
            start: now,
            failures: 0,
        });
        let window = window.at(now);
        window.failures = window.failures.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarded_client_is_read_from_the_right_only_as_far_as_trusted() {
        use axum::http::{HeaderMap, HeaderValue};
        let mut headers = HeaderMap::new();
        headers.append(
            "x-forwarded-for",
            HeaderValue::from_static("6.6.6.6, 198.51.100.7"),
        );
        headers.append("x-forwarded-for", HeaderValue::from_static("10.0.0.2:5000"));
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(forwarded_client(&headers, 0), None);
        assert_eq!(forwarded_client(&headers, 1), ip("10.0.0.2"));
        assert_eq!(forwarded_client(&headers, 2), ip("198.51.100.7"));
        // What the client wrote itself is read only when that many proxies are trusted.
        assert_eq!(forwarded_client(&headers, 3), ip("6.6.6.6"));
        assert_eq!(forwarded_client(&headers, 4), None);
        let mut v6 = HeaderMap::new();
        v6.append(
            "x-forwarded-for",
            HeaderValue::from_static("[2001:db8::1], 2001:db8::2"),
        );
        assert_eq!(forwarded_client(&v6, 1), ip("2001:db8::2"));
        assert_eq!(forwarded_client(&v6, 2), ip("2001:db8::1"));
        let mut junk = HeaderMap::new();
        junk.append("x-forwarded-for", HeaderValue::from_static("unknown"));
        assert_eq!(forwarded_client(&junk, 1), None);
        assert_eq!(forwarded_client(&HeaderMap::new(), 1), None);
    }

    fn v4(last: u8) -> Client {
        Client::of(Some(IpAddr::from([192, 0, 2, last])))
    }

    #[test]
    fn a_client_past_its_limit_waits_out_its_minute_and_others_log_in() {
        let t0 = Instant::now();
        let throttle = LoginThrottle::new(t0);
        for _ in 0..FAILURES {
            assert_eq!(throttle.admit(v4(1), t0), Ok(()));
            throttle.failed(v4(1), t0);
        }
        let later = t0 + Duration::from_secs(45);
        assert_eq!(throttle.admit(v4(1), later), Err(Duration::from_secs(15)));
        assert_eq!(throttle.admit(v4(2), later), Ok(()), "another client");
        assert_eq!(throttle.admit(Client::Unknown, later), Ok(()));
        assert_eq!(throttle.admit(v4(1), t0 + WINDOW), Ok(()));
        throttle.failed(v4(1), t0 + WINDOW);
        assert_eq!(throttle.admit(v4(1), t0 + WINDOW), Ok(()));
    }

    #[test]
    fn many_clients_together_are_bounded_too() {
        let t0 = Instant::now();
        let throttle = LoginThrottle::new(t0);
        for i in 0..ALL_FAILURES {
            let client = v4(u8::try_from(i % 50).unwrap());
            assert_eq!(throttle.admit(client, t0), Ok(()), "login {i}");
            throttle.failed(client, t0);
        }
        let later = t0 + Duration::from_secs(20);
        assert_eq!(throttle.admit(v4(200), later), Err(Duration::from_secs(40)));
        assert_eq!(throttle.admit(v4(200), t0 + WINDOW), Ok(()));
    }

    #[test]
    fn an_ipv6_client_is_its_64_bit_prefix_and_a_mapped_ipv4_its_address() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Client::of(Some(a)), Client::of(Some(b)));
        assert_ne!(Client::of(Some(a)), Client::of(Some(c)));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(Client::of(Some(mapped)), v4(7));
    }

    #[test]
    fn the_clients_tracked_are_bounded() {
        let t0 = Instant::now();
        let throttle = LoginThrottle::new(t0);
        let client = |i: usize| Client::V4([10, 0, (i >> 8) as u8, i as u8]);
        let tracked = || throttle.counts.lock().unwrap().clients.len();
        for i in 0..CLIENTS {
            throttle.failed(client(i), t0);
        }
        // Full of clients within their minute: a new one is counted overall only.
        throttle.failed(client(CLIENTS), t0);
        assert_eq!(tracked(), CLIENTS);
        // Their minutes over, they are forgotten to make room.
        throttle.failed(client(CLIENTS), t0 + WINDOW);
        assert_eq!(tracked(), 1);
    }
}
