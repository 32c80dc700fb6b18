//! The examples' database: a dedicated one on the server of DATABASE_URL, created when
//! missing, so the shared databases on that server are never written to.

use sqlx::{Connection, PgConnection};

/// Creates `name` on the server of `server_url` when it does not exist, and returns its URL.
pub(crate) async fn ensure_database(
    server_url: &str,
    name: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut admin = PgConnection::connect(server_url).await.map_err(|e| {
        format!("cannot reach PostgreSQL at {server_url}: {e}; start it (pg_ctlcluster 15 main start) or set DATABASE_URL")
    })?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(name)
            .fetch_one(&mut admin)
            .await?;
    if !exists {
        // A concurrent creator may win the race; that is fine.
        let _ = sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await;
    }
    admin.close().await?;
    Ok(with_database(server_url, name))
}

/// `postgres://u@h:p/old?x=y` with `name` in place of `old`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let server = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    }
}
