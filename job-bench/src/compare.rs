//! `compare`: this project and graphile-worker side by side, in one invocation, alternating
//! within each round (the machine drifts by ±20% over minutes; ratios taken within a round do
//! not). Per round: W1 (drain of N no-op jobs at concurrency 10) with this project's library
//! defaults and with graphile-worker tuned (local queue 500, batched completion), W3
//! (enqueue-to-start latency) of both, and the ceiling of any design that claims in batches of
//! 100: a pgbench loop of `claim 100 + delete` on 10 clients. Each measurement is a process of
//! its own (`job-bench drain`, `job-bench latency`, `node bench.js`, `pgbench`); the last line
//! is a summary of medians and of the medians of the per-round ratios.
//!
//! graphile-worker runs from an installed copy of `../shared/bench-peers/graphile` (`--graphile
//! DIR`, after `npm ci` in it); its database (`job_bench_graphile`) is created when missing.

use std::process::Command;

use serde_json::{json, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor};

use crate::args::Args;
use crate::report::{emit, loadavg, median, round};
use crate::Result;

/// The database graphile-worker's harness uses (it recreates its schema on each run).
const GRAPHILE_DB: &str = "job_bench_graphile";
/// The database of the pgbench ceiling.
const CEILING_DB: &str = "job_bench_ceiling";
/// Seconds each pgbench measurement runs.
const CEILING_SECONDS: u32 = 10;

/// The last JSON object a process printed on stdout.
fn last_json(cmd: &mut Command, what: &str) -> Result<Value> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(Value::is_object)
        })
        .ok_or_else(|| format!("{what} printed no JSON line").into())
}

fn number(v: &Value, field: &str, what: &str) -> Result<f64> {
    v[field]
        .as_f64()
        .ok_or_else(|| format!("{what}: no number `{field}` in {v}").into())
}

/// `job-bench WORKLOAD` with the library defaults.
fn ours(args: &Args, workload: &str, jobs: Option<usize>) -> Result<Value> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg(workload)
        .arg("--database-url")
        .arg(&args.database_url);
    if let Some(n) = jobs {
        cmd.arg("--jobs").arg(n.to_string());
    }
    last_json(&mut cmd, &format!("job-bench {workload}"))
}

/// graphile-worker's harness, tuned.
fn graphile(args: &Args, dir: &str, mode: &str, jobs: usize) -> Result<Value> {
    let url = database_url(&args.database_url, GRAPHILE_DB)?;
    let mut cmd = Command::new("node");
    cmd.current_dir(dir)
        .arg("bench.js")
        .arg(mode)
        .env("DATABASE_URL", url)
        .env("N", jobs.to_string())
        .env("GW_TUNED", "1");
    last_json(&mut cmd, &format!("graphile-worker {mode}"))
}

/// The server URL with another database name.
fn database_url(server: &str, db: &str) -> Result<String> {
    let mut url = url::Url::parse(server)?;
    url.set_path(db);
    Ok(url.to_string())
}

async fn ensure_database(server: &str, db: &str) -> Result<()> {
    let mut admin = server.parse::<PgConnectOptions>()?.connect().await?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(db)
        .fetch_optional(&mut admin)
        .await?;
    if exists.is_none() {
        admin
            .execute(format!("CREATE DATABASE {db}").as_str())
            .await?;
    }
    admin.close().await?;
    Ok(())
}

/// The pgbench ceiling's table and script: `claim` takes up to 100 rows with `FOR UPDATE
/// SKIP LOCKED` in (priority, run_at, id) order and deletes them in the same statement (the
/// least a batch-claiming design can do per job); the table is refilled before each run.
const CEILING_SETUP: &str = "
DROP TABLE IF EXISTS ceiling;
CREATE TABLE ceiling (id bigserial PRIMARY KEY, priority int NOT NULL DEFAULT 0,
                      run_at timestamptz NOT NULL DEFAULT now(), payload jsonb NOT NULL);
INSERT INTO ceiling (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 2000000) g;
CREATE INDEX ceiling_claim ON ceiling (priority, run_at, id);
VACUUM ANALYZE ceiling;
";

const CEILING_SCRIPT: &str = "WITH c AS (SELECT id FROM ceiling ORDER BY priority, run_at, id \
                              LIMIT 100 FOR UPDATE SKIP LOCKED) \
                              DELETE FROM ceiling USING c WHERE ceiling.id = c.id;\n";

/// Jobs per second of the pgbench ceiling (each transaction takes 100).
async fn ceiling(args: &Args) -> Result<f64> {
    let url = database_url(&args.database_url, CEILING_DB)?;
    let mut conn = url.parse::<PgConnectOptions>()?.connect().await?;
    conn.execute(CEILING_SETUP).await?;
    conn.close().await?;
    let script = tempfile::Builder::new().suffix(".sql").tempfile()?;
    std::fs::write(script.path(), CEILING_SCRIPT)?;
    let out = Command::new("pgbench")
        .args(["-n", "-c", "10", "-j", "2", "-T"])
        .arg(CEILING_SECONDS.to_string())
        .arg("-f")
        .arg(script.path())
        .arg(&url)
        .output()
        .map_err(|e| format!("pgbench: {e}"))?;
    if !out.status.success() {
        return Err(format!("pgbench: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let tps = text
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("tps = ")
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|t| t.parse::<f64>().ok())
        })
        .ok_or_else(|| format!("pgbench printed no tps: {text}"))?;
    Ok(tps * 100.0)
}

pub(crate) async fn compare(args: &Args) -> Result<()> {
    let dir = args.graphile.clone().ok_or(
        "compare needs --graphile DIR (an installed copy of ../shared/bench-peers/graphile)",
    )?;
    let n = args.jobs_or(20_000);
    ensure_database(&args.database_url, GRAPHILE_DB).await?;
    ensure_database(&args.database_url, CEILING_DB).await?;
    let mut rows: Vec<[f64; 7]> = Vec::new();
    for round_no in 1..=args.rounds {
        // Alternate which system goes first.
        let (w1_ours, w1_gw) = if round_no % 2 == 1 {
            let a = ours(args, "drain", Some(n))?;
            (a, graphile(args, &dir, "w1", n)?)
        } else {
            let b = graphile(args, &dir, "w1", n)?;
            (ours(args, "drain", Some(n))?, b)
        };
        let (w3_ours, w3_gw) = if round_no % 2 == 1 {
            let a = ours(args, "latency", None)?;
            (a, graphile(args, &dir, "w3", 200)?)
        } else {
            let b = graphile(args, &dir, "w3", 200)?;
            (ours(args, "latency", None)?, b)
        };
        let ceiling = ceiling(args).await?;
        let row = [
            number(&w1_ours, "jobs_per_s", "drain")?,
            number(&w1_gw, "jobs_per_s", "graphile w1")?,
            ceiling,
            number(&w3_ours, "p50_ms", "latency")?,
            number(&w3_ours, "p99_ms", "latency")?,
            number(&w3_gw, "p50_ms", "graphile w3")?,
            number(&w3_gw, "p99_ms", "graphile w3")?,
        ];
        emit(&json!({
            "workload": "compare",
            "round": round_no,
            "jobs": n,
            "w1_jobs_per_s": row[0],
            "w1_graphile_tuned_jobs_per_s": row[1],
            "w1_vs_graphile_tuned": round(row[0] / row[1], 3),
            "pgbench_claim100_jobs_per_s": round(row[2], 0),
            "w1_vs_pgbench_ceiling": round(row[0] / row[2], 3),
            "w3_p50_ms": row[3],
            "w3_p99_ms": row[4],
            "w3_graphile_tuned_p50_ms": row[5],
            "w3_graphile_tuned_p99_ms": row[6],
            "loadavg": loadavg(),
        }));
        rows.push(row);
    }
    let col = |i: usize| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>());
    let ratio = |a: usize, b: usize| {
        round(
            median(&rows.iter().map(|r| r[a] / r[b]).collect::<Vec<_>>()),
            3,
        )
    };
    emit(&json!({
        "workload": "compare",
        "summary": true,
        "rounds": rows.len(),
        "jobs": n,
        "w1_jobs_per_s": round(col(0), 0),
        "w1_graphile_tuned_jobs_per_s": round(col(1), 0),
        "pgbench_claim100_jobs_per_s": round(col(2), 0),
        "w1_vs_graphile_tuned": ratio(0, 1),
        "w1_vs_pgbench_ceiling": ratio(0, 2),
        "w3_p50_ms": col(3),
        "w3_p99_ms": col(4),
        "w3_graphile_tuned_p50_ms": col(5),
        "w3_graphile_tuned_p99_ms": col(6),
        "w3_p50_minus_graphile_ms": round(
            median(&rows.iter().map(|r| r[3] - r[5]).collect::<Vec<_>>()),
            3
        ),
    }));
    Ok(())
}
