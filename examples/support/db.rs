//! The examples' database: a dedicated one on the server of DATABASE_URL, created when
//! missing, so the shared databases on that server are never written to.

use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Postgres};

/// Creates `name` on the server of `server_url` when it does not exist, and returns the options
/// to connect to it.
pub(crate) async fn ensure_database(
    server_url: &str,
    name: &str,
) -> Result<PgConnectOptions, Box<dyn std::error::Error>> {
    let options = server_url.parse::<PgConnectOptions>()?.database(name);
    let url = options.to_url_lossy().to_string();
    let exists = Postgres::database_exists(&url).await.map_err(|e| {
        format!(
            "cannot reach PostgreSQL at {server_url}: {e}; start it (pg_ctlcluster 15 main \
             start) or set DATABASE_URL"
        )
    })?;
    if !exists {
        // A concurrent creator may win the race; its database serves as well.
        if let Err(e) = Postgres::create_database(&url).await {
            if !Postgres::database_exists(&url).await? {
                return Err(e.into());
            }
        }
    }
    Ok(options)
}
