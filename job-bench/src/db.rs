//! The benchmark's own database: created on the server (the URL's database is only the admin
//! connection, its contents are never touched), migrated, and dropped at the end unless kept.

use std::time::Duration;

use job::PgStore;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};

use crate::Result;

/// A database of the benchmark's own.
pub(crate) struct BenchDb {
    name: String,
    admin: PgConnectOptions,
    options: PgConnectOptions,
    keep: bool,
    dropped: bool,
}

impl BenchDb {
    /// Creates a fresh `job_bench_<random>` database, or opens `keep` (creating it when
    /// missing) and leaves it in place at the end. Migrates it either way.
    pub(crate) async fn open(server_url: &str, keep: Option<&str>) -> Result<BenchDb> {
        let admin: PgConnectOptions = server_url
            .parse()
            .map_err(|e| format!("not a PostgreSQL URL ({server_url}): {e}"))?;
        let admin_db = admin.get_database().unwrap_or("postgres").to_owned();
        let name = match keep {
            Some(name) => name.to_owned(),
            None => format!("job_bench_{}", uuid::Uuid::new_v4().simple()),
        };
        if name == admin_db {
            return Err(format!(
                "refusing to use the admin database {name:?} as the benchmark's database"
            )
            .into());
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(format!("database names are [a-z0-9_], got {name:?}").into());
        }
        let mut conn = admin.connect().await.map_err(|e| {
            format!(
                "no PostgreSQL at {}:{} ({e}): start one with `pg_ctlcluster 15 main start` \
                 or set DATABASE_URL",
                admin.get_host(),
                admin.get_port()
            )
        })?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(&name)
                .fetch_one(&mut conn)
                .await?;
        if !exists {
            conn.execute(format!("CREATE DATABASE {name}").as_str())
                .await?;
        }
        let _ = conn.close().await;
        let options = admin.clone().database(&name);
        let db = BenchDb {
            name,
            admin,
            options,
            keep: keep.is_some(),
            dropped: false,
        };
        let pool = db.pool(2).await?;
        PgStore::new(pool.clone()).migrate().await?;
        pool.execute(
            "CREATE SCHEMA IF NOT EXISTS bench;
             CREATE TABLE IF NOT EXISTS bench.meta (key text PRIMARY KEY, value text NOT NULL);",
        )
        .await?;
        pool.close().await;
        Ok(db)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A URL for a child process.
    pub(crate) fn url(&self) -> String {
        self.options.to_url_lossy().to_string()
    }

    /// A pool of at most `size` connections, one of them opened now.
    pub(crate) async fn pool(&self, size: u32) -> Result<PgPool> {
        Ok(pool(self.options.clone(), size).await?)
    }

    /// Like [`pool`](Self::pool), its connections named `app` (`application_name`), with
    /// session settings (`name=value`) on every connection.
    pub(crate) async fn pool_with(
        &self,
        size: u32,
        app: &str,
        settings: &[String],
    ) -> Result<PgPool> {
        let mut options = self.options.clone().application_name(app);
        for s in settings {
            let (name, value) = s
                .split_once('=')
                .ok_or_else(|| format!("a setting is name=value, got {s:?}"))?;
            options = options.options([(name, value)]);
        }
        Ok(pool(options, size).await?)
    }

    /// Drops the database unless it is kept.
    pub(crate) async fn close(mut self) -> Result<()> {
        self.dropped = true;
        if self.keep {
            return Ok(());
        }
        let mut conn = self.admin.connect().await?;
        conn.execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str())
            .await?;
        let _ = conn.close().await;
        Ok(())
    }
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        if self.dropped || self.keep {
            return;
        }
        // An error path: drop it on a thread of its own (we may be inside the runtime).
        let admin = self.admin.clone();
        let name = std::mem::take(&mut self.name);
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = admin.connect().await.ok()?;
                conn.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// A pool on `options` of at most `size` connections, one of them opened now.
pub(crate) async fn pool(options: PgConnectOptions, size: u32) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(size)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
}

/// A single connection, for the poller.
pub(crate) async fn connect(pool_of: &PgPool) -> Result<PgConnection> {
    let options = pool_of.connect_options().as_ref().clone();
    Ok(options.connect().await?)
}
