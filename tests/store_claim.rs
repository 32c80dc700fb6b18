//! What a claim reads follows what it returns (PostgreSQL specifics; the claim's contract is in
//! `job_testkit::conformance::claim`): rows it cannot take, however many, are never read. The
//! same holds for the rate-limited kinds' claim and for the statements that feed claims (the
//! stager and the rescuer): each reads what it changes, not the table.
//! Measured on the statement's own plan (`EXPLAIN ANALYZE`, rows read by every scan of
//! `job.jobs`), not by a clock: the statement inside `job.claim` (migration 0021), read back
//! from the database and planned generically, as the function plans it.

mod store_support;

use job_core::{ClaimKind, ClaimRequest, Store};
use job_testkit::TestDb;
use serde_json::Value;
use store_support::{kind, request, rows_read};

/// Inserts `n` jobs of `kind` in `state`, due `run_at` (an SQL expression).
async fn fill(pool: &sqlx::PgPool, n: i64, kind: &str, state: &str, run_at: &str) {
    sqlx::query(&format!(
        "INSERT INTO job.jobs (kind, queue, payload, state, run_at)
         SELECT $2, 'default', '{{}}', '{state}', {run_at} + g * interval '1 millisecond'
         FROM generate_series(1, $1::bigint) g"
    ))
    .bind(n)
    .bind(kind)
    .execute(pool)
    .await
    .unwrap();
}

/// Inserts `n` running jobs of `kind` whose leases run for another hour.
async fn live_leases(pool: &sqlx::PgPool, n: i64, kind: &str) {
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, state, attempt, lock_token, locked_until,
                               locked_by)
         SELECT $2, 'default', '{}', 'running', 1, gen_random_uuid(),
                now() + interval '1 hour', 'live-worker'
         FROM generate_series(1, $1::bigint) g",
    )
    .bind(n)
    .bind(kind)
    .execute(pool)
    .await
    .unwrap();
}

/// The statement `job.claim` runs (its `RETURN QUERY`), as the database holds it, and a check
/// that the function plans it once per connection.
async fn claim_statement(tx: &mut sqlx::PgConnection) -> String {
    const CLAIM: &str =
        "job.claim(text, text[], integer[], bigint[], integer, text, integer[], text[])";
    let config: Vec<String> =
        sqlx::query_scalar("SELECT proconfig FROM pg_proc WHERE oid = $1::regprocedure")
            .bind(CLAIM)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    assert!(
        config
            .iter()
            .any(|c| c == "plan_cache_mode=force_generic_plan"),
        "job.claim must plan its statement once per connection: {config:?}"
    );
    // Its statement uses $1..$8, not argument names.
    function_statement(tx, CLAIM, &[]).await
}

/// Runs the claim under `EXPLAIN ANALYZE` in a transaction it rolls back, taking only jobs
/// ahead of the first waiting job of the `ahead_of` kinds (`$8`, as for rate-limited kinds);
/// returns (jobs claimed, rows of `job.jobs` read).
async fn explain_claim(
    pool: &sqlx::PgPool,
    request: &ClaimRequest,
    ahead_of: &[&str],
) -> (f64, f64) {
    let mut tx = pool.begin().await.unwrap();
    let statement = claim_statement(&mut tx).await;
    sqlx::raw_sql(&format!(
        "SET LOCAL plan_cache_mode = force_generic_plan;
         PREPARE claim_statement (text, text[], integer[], bigint[], integer, text, integer[],
                                  text[]) AS {statement}"
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    let kinds: Vec<&str> = request.kinds.iter().map(|k| k.kind.as_str()).collect();
    let versions: Vec<i32> = request.kinds.iter().map(|k| k.max_version).collect();
    let leases: Vec<i64> = request.kinds.iter().map(|_| 30_000).collect();
    let caps: Vec<Option<i32>> = request
        .kinds
        .iter()
        .map(|k| k.concurrency.map(|c| c as i32))
        .collect();
    // EXECUTE takes no protocol parameters: its arguments are quoted into its text.
    let explain: String = sqlx::query_scalar(
        "SELECT format('EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim_statement(%L::text,
             %L::text[], %L::integer[], %L::bigint[], %L::integer, %L::text, %L::integer[],
             %L::text[])', $1::text, $2::text[], $3::integer[], $4::bigint[], $5::integer,
             $6::text, $7::integer[], $8::text[])",
    )
    .bind(&request.queue)
    .bind(kinds)
    .bind(versions)
    .bind(leases)
    .bind(request.limit as i32)
    .bind(&request.worker_id)
    .bind(caps)
    .bind(ahead_of)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let (plan,): (Value,) = sqlx::query_as(&explain).fetch_one(&mut *tx).await.unwrap();
    // A prepared statement outlives the transaction: the pooled connection goes on.
    sqlx::raw_sql("DEALLOCATE claim_statement")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let root = &plan[0]["Plan"];
    assert_eq!(
        root["Node Type"], "Sort",
        "the plan of the claim's own statement, not of a call: {plan}"
    );
    (root["Actual Rows"].as_f64().unwrap(), rows_read(root))
}

#[tokio::test]
async fn a_claim_reads_only_what_it_can_take() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    // 20,000 jobs of the claimed kind scheduled next month; 20,000 due jobs of a kind this
    // worker does not run, older than everything; 5,000 due jobs of a paused kind; a limited
    // kind at its limit (2 running) with 5,000 due; 5,000 running jobs of another kind (the
    // limited kind's room is counted over its own running jobs, not every running job); and
    // 10 due jobs of the claimed kind.
    fill(
        pool,
        20_000,
        "a.claimed",
        "scheduled",
        "now() + interval '30 days'",
    )
    .await;
    fill(
        pool,
        20_000,
        "b.unregistered",
        "available",
        "now() - interval '1 day'",
    )
    .await;
    fill(
        pool,
        5_000,
        "c.paused",
        "available",
        "now() - interval '1 day'",
    )
    .await;
    fill(
        pool,
        5_002,
        "d.limited",
        "available",
        "now() - interval '1 day'",
    )
    .await;
    fill(
        pool,
        10,
        "a.claimed",
        "available",
        "now() - interval '1 hour'",
    )
    .await;
    live_leases(pool, 5_000, "e.running").await;
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();
    sqlx::query("INSERT INTO job.pauses (scope, name) VALUES ('kind', 'c.paused')")
        .execute(pool)
        .await
        .unwrap();
    let limited = ClaimKind {
        concurrency: Some(2),
        rate: None,
        ..kind("d.limited")
    };
    let mut two = request(&[], 2);
    two.kinds = vec![limited.clone()];
    assert_eq!(
        store.claim(&two).await.unwrap().len(),
        2,
        "d.limited at its limit"
    );

    let mut claim = request(&["a.claimed", "c.paused"], 100);
    claim.kinds.push(limited);
    let (claimed, read) = explain_claim(pool, &claim, &[]).await;
    assert_eq!(claimed, 10.0, "only the 10 due jobs of the claimed kind");
    // The 10 it claims (read by their kind's scan, then by the update's primary-key lookup),
    // the 2 running jobs of the limited kind it counts, and nothing of the 50,000 it cannot
    // take or of the 5,000 running jobs of another kind.
    assert!(
        read <= 3.0 * claimed + 2.0,
        "the claim read {read} rows of job.jobs to claim {claimed}"
    );

    // The same, ahead of a kind whose first waiting job is older than every job of the
    // claimed kind (as lease.rs asks before claiming a rate-limited kind): nothing to take,
    // and the bound stops the claimed kind's scan at its start instead of reading its 10 jobs
    // and filtering them out. It reads the bound (1), the limited kind's running jobs (2) and
    // the claimed kind's payload version (1, migration 0050).
    let (claimed, read) = explain_claim(pool, &claim, &["b.unregistered"]).await;
    assert_eq!(
        claimed, 0.0,
        "every job of the claimed kind is behind the bound"
    );
    assert!(
        read <= 4.0,
        "a claim bounded ahead of another kind read {read} rows of job.jobs"
    );

    // Idle: nothing due of a kind this worker runs, the same rows waiting.
    let idle = request(&["a.claimed"], 100);
    let _ = store.claim(&idle).await.unwrap();
    let (claimed, read) = explain_claim(pool, &idle, &[]).await;
    assert_eq!(claimed, 0.0);
    assert!(read <= 1.0, "an idle claim read {read} rows of job.jobs");
}

/// Inserts `n` available jobs of `kind` at payload `version`, due an hour ago plus `offset`
/// milliseconds and one more per job.
/// A worker's first claim on an empty table plans job.claim's statement for the connection
/// (`plan_cache_mode = force_generic_plan`), and the plan stays until the table's statistics
/// change. Planned from an empty table's costs, it reached the rows it picked by reading the
/// whole table, once the table had grown too (a sequential scan filtered on `ctid`: 300 to 875
/// ms a claim in a soak's first seconds, migration 0064). Counted by the server
/// (`pg_stat_xact_user_tables`, this transaction's scans), on the function itself.
#[tokio::test]
async fn a_claim_planned_on_an_empty_table_never_reads_the_whole_table_once_it_grew() {
    use sqlx::Connection;
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    const CLAIM: &str = "SELECT count(*) FROM job.claim('default', ARRAY['a.claimed'], \
                         ARRAY[1], ARRAY[30000]::bigint[], $1, 'worker-1', \
                         ARRAY[NULL]::integer[], '{}')";
    let mut conn = pool.acquire().await.unwrap();
    let first: i64 = sqlx::query_scalar(CLAIM)
        .bind(10)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(first, 0, "the table is empty");
    fill(
        pool,
        20_000,
        "a.claimed",
        "available",
        "now() - interval '1 hour'",
    )
    .await;
    let mut tx = conn.begin().await.unwrap();
    let claimed: i64 = sqlx::query_scalar(CLAIM)
        .bind(10)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(claimed, 10);
    let (scans, rows): (i64, i64) = sqlx::query_as(
        "SELECT seq_scan, seq_tup_read FROM pg_stat_xact_user_tables
         WHERE relid = 'job.jobs'::regclass",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(
        (scans, rows),
        (0, 0),
        "a claim of 10 read job.jobs by {scans} sequential scan(s) of {rows} rows"
    );
    tx.rollback().await.unwrap();
}

/// The rows of job.jobs read so far (by sequential scans and by index, together), once the
/// counters of the session `pool` holds (one connection) are in the server's statistics.
async fn jobs_rows_read(pool: &sqlx::PgPool) -> i64 {
    // Pending counters reach the statistics when the session goes idle after this.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables
         WHERE relid = 'job.jobs'::regclass",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The worker's periodic passes (stager, heartbeat with the progress it carries, rescuer,
/// expirer) run every few seconds on every worker. Kept as a session's generic plans, their
/// statements planned while job.jobs was empty read the whole table once it grew (the
/// heartbeat by two sequential scans, the stager's dependency pass by four, the rescuer, the
/// expirer and the progress by one or two each), until the pruner's next ANALYZE (migration
/// 0066). After eight passes on the empty table, each now reads a handful of rows of 80,000
/// to do nothing, or to renew one lease.
#[tokio::test]
async fn periodic_passes_planned_on_an_empty_table_read_little_once_it_grew() {
    let db = TestDb::new().await;
    // One session, so that every statement is planned and kept where the next one runs.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(db.connect_options())
        .await
        .unwrap();
    let store = job_postgres::PgStore::new(pool.clone());
    let renewal = |id, token| job_core::Renewal {
        lease: job_core::Lease { id, token },
        extend_by: std::time::Duration::from_secs(30),
        stuck: false,
    };
    let nobody = renewal(1, uuid::Uuid::from_u128(1));
    for _ in 0..8 {
        assert_eq!(store.stage_due(1000).await.unwrap(), 0);
        let report = store
            .heartbeat(std::slice::from_ref(&nobody))
            .await
            .unwrap();
        assert_eq!(report.lost.len(), 1);
        assert_eq!(store.rescue_expired(1000).await.unwrap().retried, 0);
        assert_eq!(store.expire(1000).await.unwrap().discarded, 0);
        let progress = [(nobody.lease, "{}".to_owned())];
        assert_eq!(store.save_progress(&progress).await.unwrap(), 0);
    }
    fill(
        &pool,
        20_000,
        "a.later",
        "scheduled",
        "now() + interval '30 days'",
    )
    .await;
    fill(
        &pool,
        20_000,
        "a.waiting",
        "available",
        "now() - interval '1 hour'",
    )
    .await;
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, state, attempt, finalized_at)
         SELECT 'a.done', 'default', '{}', 'completed', 1, now() FROM generate_series(1, 20000)",
    )
    .execute(&pool)
    .await
    .unwrap();
    live_leases(&pool, 20_000, "a.running").await;
    let (id, token): (i64, uuid::Uuid) = sqlx::query_as(
        "SELECT id, lock_token FROM job.jobs WHERE state = 'running' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let held = renewal(id, token);

    let mut read = Vec::new();
    let mut last = jobs_rows_read(&pool).await;
    let mut count = |name: &'static str, now: i64| {
        read.push((name, now - last));
        last = now;
    };
    assert_eq!(store.stage_due(1000).await.unwrap(), 0);
    count("stage", jobs_rows_read(&pool).await);
    let report = store.heartbeat(std::slice::from_ref(&held)).await.unwrap();
    assert!(
        report.lost.is_empty() && report.busy.is_empty(),
        "{report:?}"
    );
    count("heartbeat", jobs_rows_read(&pool).await);
    assert_eq!(store.rescue_expired(1000).await.unwrap().retried, 0);
    count("rescue", jobs_rows_read(&pool).await);
    assert_eq!(store.expire(1000).await.unwrap().discarded, 0);
    count("expire", jobs_rows_read(&pool).await);
    let progress = [(held.lease, "{\"done\": 1}".to_owned())];
    assert_eq!(store.save_progress(&progress).await.unwrap(), 1);
    count("progress", jobs_rows_read(&pool).await);
    assert!(
        read.iter().all(|&(_, rows)| rows < 100),
        "rows of job.jobs read by each pass: {read:?}"
    );
    pool.close().await;
}

async fn fill_version(pool: &sqlx::PgPool, n: i64, kind: &str, version: i32, offset: i64) {
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, state, run_at, payload_version)
         SELECT $2, 'default', '{}', 'available',
                now() - interval '1 hour' + ($4 + g) * interval '1 millisecond', $3
         FROM generate_series(1, $1::bigint) g",
    )
    .bind(n)
    .bind(kind)
    .bind(version)
    .bind(offset)
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_claim_never_reads_the_jobs_of_a_payload_version_its_worker_does_not_decode() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    // A rolling deploy: the new release enqueued 20,000 jobs of version 3, older than
    // everything, while this worker of the old release decodes versions up to 2. Its jobs of
    // versions 1 and 2 are interleaved in claim order behind them, and a version-4 job sits
    // between those.
    fill_version(pool, 20_000, "a.claimed", 3, 0).await;
    fill_version(pool, 3, "a.claimed", 1, 100_000).await;
    fill_version(pool, 1, "a.claimed", 4, 100_001).await;
    fill_version(pool, 3, "a.claimed", 2, 100_002).await;
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();
    let mut claim = request(&["a.claimed"], 100);
    claim.kinds[0].max_version = 2;

    let (claimed, read) = explain_claim(pool, &claim, &[]).await;
    assert_eq!(claimed, 6.0, "the 6 jobs of versions 1 and 2");
    // The 6 (read by their version's scan, then by the update's lookup) and one probe per
    // version it decodes (2), nothing of the 20,001 jobs of newer versions.
    assert!(
        read <= 2.0 * claimed + 3.0,
        "the claim read {read} rows of job.jobs to claim {claimed}"
    );

    // Claimed for real: in claim order across versions, the newer versions left waiting.
    let jobs = store.claim(&claim).await.unwrap();
    let versions: Vec<i32> = jobs.iter().map(|j| j.payload_version).collect();
    assert_eq!(versions, [1, 1, 1, 2, 2, 2]);
    let ids: Vec<i64> = jobs.iter().map(|j| j.lease.id).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(
        ids, sorted,
        "claim order is run_at, then id, across versions"
    );

    // Idle: only jobs of newer versions wait.
    let (claimed, read) = explain_claim(pool, &claim, &[]).await;
    assert_eq!(claimed, 0.0);
    assert!(
        read <= 1.0,
        "an idle claim read {read} rows of job.jobs past the jobs of newer versions"
    );
    // A worker of the new release takes them, ahead of nothing.
    let mut new = request(&["a.claimed"], 5);
    new.kinds[0].max_version = 4;
    let jobs = store.claim(&new).await.unwrap();
    assert_eq!(jobs.len(), 5);
    assert!(jobs.iter().all(|j| j.payload_version == 3));
}

#[tokio::test]
async fn due_jobs_become_claimable_through_the_stager_and_keep_their_place() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    // Due long ago but scheduled: not claimable until staged; then claimed ahead of a job that
    // became available after it (it keeps its run_at).
    fill(
        pool,
        1,
        "a.claimed",
        "scheduled",
        "now() - interval '2 hours'",
    )
    .await;
    fill(
        pool,
        1,
        "a.claimed",
        "available",
        "now() - interval '1 hour'",
    )
    .await;
    fill(
        pool,
        1,
        "a.claimed",
        "retryable",
        "now() + interval '1 hour'",
    )
    .await;
    let first = store.claim(&request(&["a.claimed"], 10)).await.unwrap();
    assert_eq!(first.len(), 1, "only the available one before staging");
    assert_eq!(
        store.stage_due(100).await.unwrap(),
        1,
        "the due scheduled job"
    );
    assert_eq!(
        store.stage_due(100).await.unwrap(),
        0,
        "the retry is not due yet"
    );
    let states: Vec<(String, bool)> = sqlx::query_as(
        "SELECT state::text, run_at < now() - interval '90 minutes' FROM job.jobs ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        states,
        vec![
            ("available".to_owned(), true),
            ("running".to_owned(), false),
            ("retryable".to_owned(), false),
        ],
        "staged with its run_at kept"
    );
    assert_eq!(
        store
            .claim(&request(&["a.claimed"], 10))
            .await
            .unwrap()
            .len(),
        1
    );
}

/// The statement that claims a rate-limited kind, as the store sends it.
const CLAIM_RATED: &str = include_str!("../job-postgres/src/sql/claim_rated.sql");

/// The statement that opens every transaction of a claim with a limited kind, as the store
/// sends it: the kinds' advisory locks, and JIT off for the transaction.
const CLAIM_LOCK: &str = include_str!("../job-postgres/src/sql/claim_lock.sql");

/// Runs the rate-limited claim of `kind` under `EXPLAIN ANALYZE` with plans of `plan_mode`
/// (`force_generic_plan`: a connection's statement after its fifth execution;
/// `force_custom_plan`: before) and commits it, so that its key cursor and start windows move
/// on as a worker's would. Returns (jobs claimed, rows of `job.jobs` read).
async fn explain_rated(
    pool: &sqlx::PgPool,
    plan_mode: &str,
    kind: &str,
    limit: i32,
    starts_per_key: i32,
) -> (f64, f64) {
    let root = explain_rated_plan(pool, plan_mode, kind, limit, starts_per_key, 1).await;
    (root["Actual Rows"].as_f64().unwrap(), rows_read(&root))
}

/// [`explain_rated`]'s plan.
async fn explain_rated_plan(
    pool: &sqlx::PgPool,
    plan_mode: &str,
    kind: &str,
    limit: i32,
    starts_per_key: i32,
    max_version: i32,
) -> Value {
    let mut tx = pool.begin().await.unwrap();
    // In the claim's transaction, as the store runs it: after the kind's lock.
    sqlx::query(CLAIM_LOCK)
        .bind([kind])
        .execute(&mut *tx)
        .await
        .unwrap();
    // At most `starts_per_key` starts per key in any minute, no concurrency limit.
    let root = explain_prepared(
        &mut tx,
        plan_mode,
        CLAIM_RATED,
        "(text, text, integer, bigint, integer, text, integer, bigint, integer)",
        &format!(
            "('default', '{kind}', {max_version}, 30000, {limit}, 'worker-1', \
             {starts_per_key}, 60000, NULL)"
        ),
    )
    .await;
    tx.commit().await.unwrap();
    root
}

/// The recorded starts (elements of `job.rate_windows.starts`) a plan read.
fn starts_read(plan: &Value) -> f64 {
    let mut total = 0.0;
    if plan["Node Type"] == "Function Scan" && plan["Function Name"] == "unnest" {
        let loops = plan["Actual Loops"].as_f64().unwrap_or(1.0);
        total += plan["Actual Rows"].as_f64().unwrap_or(0.0) * loops;
        total += plan["Rows Removed by Filter"].as_f64().unwrap_or(0.0);
    }
    if let Some(children) = plan["Plans"].as_array() {
        total += children.iter().map(starts_read).sum::<f64>();
    }
    total
}

#[tokio::test]
async fn a_rate_key_at_its_limit_is_passed_over_without_reading_its_starts() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    // For each plan mode its own kind: 40 keys with 5 due jobs each.
    for kind in ["r.generic", "r.custom"] {
        sqlx::query(
            "INSERT INTO job.jobs (kind, queue, payload, state, run_at, rate_key)
             SELECT $1, 'default', '{}', 'available',
                    now() - interval '1 hour' + g * interval '1 millisecond',
                    'tenant-' || (g % 40)
             FROM generate_series(1, 200) g",
        )
        .bind(kind)
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();
    for (mode, kind) in [
        ("force_generic_plan", "r.generic"),
        ("force_custom_plan", "r.custom"),
    ] {
        // Three starts a minute per key: the first claim takes three of each key's jobs.
        let plan = explain_rated_plan(pool, mode, kind, 200, 3, 1).await;
        assert_eq!(plan["Actual Rows"], 120.0, "{mode}: three of each key");
        // Every key is at its limit: the claim takes nothing and reads none of the 120 starts
        // (it read all of them before migration 0030).
        let plan = explain_rated_plan(pool, mode, kind, 200, 3, 1).await;
        assert_eq!(plan["Actual Rows"], 0.0, "{mode}: every key at its limit");
        assert_eq!(starts_read(&plan), 0.0, "{mode}: starts read at the limit");
        // A deploy raises the limit to four: the keys' windows were written with three, so the
        // claim counts their starts, and each key gives one more job.
        let plan = explain_rated_plan(pool, mode, kind, 200, 4, 1).await;
        assert_eq!(plan["Actual Rows"], 40.0, "{mode}: one more of each key");
        assert!(
            starts_read(&plan) >= 120.0,
            "{mode}: the starts were counted"
        );
        // At the new limit, nothing is read again.
        let plan = explain_rated_plan(pool, mode, kind, 200, 4, 1).await;
        assert_eq!(
            plan["Actual Rows"], 0.0,
            "{mode}: every key at its new limit"
        );
        assert_eq!(
            starts_read(&plan),
            0.0,
            "{mode}: starts read at the new limit"
        );
        let (windows, shortcut): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (
                 WHERE limit_starts = 4
                   AND limit_start = (SELECT min(s) FROM unnest(starts) s)
                   AND cardinality(starts) = 4)
             FROM job.rate_windows WHERE kind = $1",
        )
        .bind(kind)
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(
            (windows, shortcut),
            (40, 40),
            "{mode}: each key's fourth newest start"
        );
    }
}

#[tokio::test]
async fn a_rate_limited_claim_reads_its_keys_and_what_it_can_take_not_its_backlog() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    const KEYS: f64 = 40.0;
    // For each plan mode its own kind: 20,000 due jobs over 40 rate keys. And 20,000 due jobs
    // of a kind nobody runs, older than all of them.
    for kind in ["r.generic", "r.custom"] {
        sqlx::query(
            "INSERT INTO job.jobs (kind, queue, payload, state, run_at, rate_key)
             SELECT $1, 'default', '{}', 'available',
                    now() - interval '1 hour' + g * interval '1 millisecond',
                    'tenant-' || (g % 40)
             FROM generate_series(1, 20000) g",
        )
        .bind(kind)
        .execute(pool)
        .await
        .unwrap();
    }
    fill(
        pool,
        20_000,
        "b.unregistered",
        "available",
        "now() - interval '1 day'",
    )
    .await;
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();

    for (mode, kind) in [
        ("force_generic_plan", "r.generic"),
        ("force_custom_plan", "r.custom"),
    ] {
        // Keys with room to spare (1,000 starts a minute each): the claim reads each key's
        // first jobs, up to its own limit of 10 per key, never the 500 each key holds. The
        // second claim starts after the key the first stopped at.
        for round in ["first", "second"] {
            let (claimed, read) = explain_rated(pool, mode, kind, 10, 1000).await;
            assert_eq!(claimed, 10.0, "{mode}, {round} claim");
            // Per key: its probe, one for its versions, and at most 10 of its jobs.
            assert!(
                read <= 5.0 * KEYS + KEYS * 10.0 + 2.0 * claimed,
                "{mode}, {round} claim: read {read} rows of job.jobs to claim {claimed}"
            );
        }
        // One start per key a minute: each key has had its start, so nothing is due; the
        // claim looks at each key, not at the 19,980 jobs waiting behind them. (A key with
        // room costs one more probe, for its versions.)
        let (claimed, read) = explain_rated(pool, mode, kind, 100, 1).await;
        assert_eq!(claimed, 20.0, "{mode}: the 20 keys without a start yet");
        let (claimed, read_full) = explain_rated(pool, mode, kind, 100, 1).await;
        assert_eq!(claimed, 0.0, "{mode}: every key at its limit");
        assert!(
            read <= 4.0 * KEYS + 3.0 * 20.0 && read_full <= 4.0 * KEYS,
            "{mode}: read {read} rows to claim 20 and {read_full} to claim none"
        );
    }
}

/// Jobs a worker cannot take, at the head of a rate-limited kind (a payload version newer than
/// it decodes: a producer deployed before its workers), do not count toward the 100 jobs its
/// claim looks among for jobs without a key: 100 of them stopped every job without a key for
/// good, whatever waited behind.
#[tokio::test]
async fn jobs_a_worker_cannot_take_never_hide_the_rate_limited_jobs_behind_them() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    for kind in ["r.generic", "r.custom"] {
        sqlx::query(
            "INSERT INTO job.jobs (kind, queue, payload, state, run_at, payload_version)
             SELECT $1, 'default', '{}'::jsonb, 'available'::job.job_state,
                    now() - interval '1 hour' + g * interval '1 millisecond', 2
             FROM generate_series(1, 150) g
             UNION ALL
             SELECT $1, 'default', '{}'::jsonb, 'available'::job.job_state,
                    now() - interval '1 minute', 1",
        )
        .bind(kind)
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();
    for (mode, kind) in [
        ("force_generic_plan", "r.generic"),
        ("force_custom_plan", "r.custom"),
    ] {
        let (claimed, _) = explain_rated(pool, mode, kind, 10, 1000).await;
        assert_eq!(
            claimed, 1.0,
            "{mode}: the one job of version 1, behind 150 of version 2"
        );
    }
}

/// A rolling deploy's jobs of a payload version newer than the worker decodes, with rate keys
/// and without, ahead of everything: the rate-limited claim reads none of them (it read each,
/// under the kind's lock, before migration 0051), and takes the versions it decodes in claim
/// order.
#[tokio::test]
async fn a_rate_limited_claim_never_reads_the_jobs_of_a_payload_version_its_worker_does_not_decode()
{
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    const KEYS: f64 = 40.0;
    for kind in ["r.generic", "r.custom"] {
        // 20,000 jobs of version 3 over 40 keys and 20,000 without a key, oldest; then, in
        // claim order, 3 of version 1 and 3 of version 2 with a key and as many without, and
        // one of version 4 between them. The worker decodes up to version 2.
        sqlx::query(
            "INSERT INTO job.jobs (kind, queue, payload, state, run_at, rate_key,
                                   payload_version)
             SELECT $1, 'default', '{}'::jsonb, 'available'::job.job_state,
                    now() - interval '2 hours' + g * interval '1 millisecond',
                    CASE WHEN g % 2 = 0 THEN 'tenant-' || (g % 80) / 2 END, 3
             FROM generate_series(1, 40000) g
             UNION ALL
             SELECT $1, 'default', '{}'::jsonb, 'available'::job.job_state,
                    now() - interval '1 hour' + g * interval '1 millisecond',
                    CASE WHEN g % 2 = 0 THEN 'tenant-' || g END,
                    CASE WHEN g = 7 THEN 4 WHEN g < 7 THEN 1 ELSE 2 END
             FROM generate_series(1, 13) g",
        )
        .bind(kind)
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();
    for (mode, kind) in [
        ("force_generic_plan", "r.generic"),
        ("force_custom_plan", "r.custom"),
    ] {
        let plan = explain_rated_plan(pool, mode, kind, 100, 1000, 2).await;
        let (claimed, read) = (plan["Actual Rows"].as_f64().unwrap(), rows_read(&plan));
        assert_eq!(claimed, 12.0, "{mode}: the 12 jobs of versions 1 and 2");
        // Each key found by a probe (the 40 keys of version 3 and the 6 of the jobs it takes)
        // and probed for its versions, the jobs it takes (read by their scans, then by the
        // update), and one probe per version for the jobs without a key: nothing of the
        // 40,000 of version 3.
        assert!(
            read <= 4.0 * (KEYS + 6.0) + 2.0 * claimed + 4.0,
            "{mode}: the claim read {read} rows of job.jobs to claim {claimed}"
        );
        // Claimed: versions 1 and 2 in claim order, the newer versions left waiting.
        let taken: Vec<(i32, i64)> = sqlx::query_as(
            "SELECT payload_version, id FROM job.jobs
             WHERE kind = $1 AND state = 'running' ORDER BY run_at, id",
        )
        .bind(kind)
        .fetch_all(pool)
        .await
        .unwrap();
        let versions: Vec<i32> = taken.iter().map(|(v, _)| *v).collect();
        assert_eq!(versions, [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2], "{mode}");
        // Idle: only jobs of newer versions wait.
        let plan = explain_rated_plan(pool, mode, kind, 100, 1000, 2).await;
        let (claimed, read) = (plan["Actual Rows"].as_f64().unwrap(), rows_read(&plan));
        assert_eq!(claimed, 0.0, "{mode}: idle");
        assert!(
            read <= 4.0 * KEYS + 4.0,
            "{mode}: an idle claim read {read} rows of job.jobs past the jobs of newer versions"
        );
    }
}

/// A claim of a limited kind runs in a transaction with JIT compilation off, whatever the
/// connection's setting: the rate-limited claim's plan is estimated far above
/// `jit_above_cost`, and compiling it took about 1.8 s for a claim of a few milliseconds.
#[tokio::test]
async fn a_limited_claim_is_never_compiled() {
    let db = TestDb::new().await;
    let pool = db.store().pool().clone();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL jit = on")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(CLAIM_LOCK)
        .bind(["r.kind"])
        .execute(&mut *tx)
        .await
        .unwrap();
    let jit: String = sqlx::query_scalar("SELECT current_setting('jit')")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(jit, "off");
}

/// Runs `sql` (a statement of the store's, with parameters of `types`) prepared with plans of
/// `plan_mode` under `EXPLAIN ANALYZE`, with `args` (SQL literals), in `tx`; returns the root
/// of its plan.
async fn explain_prepared(
    tx: &mut sqlx::PgConnection,
    plan_mode: &str,
    sql: &str,
    types: &str,
    args: &str,
) -> Value {
    sqlx::raw_sql(&format!(
        "SET LOCAL plan_cache_mode = {plan_mode};
         PREPARE measured {types} AS {}",
        sql.trim_end().trim_end_matches(';')
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    let (plan,): (Value,) = sqlx::query_as(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE measured {args}"
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    sqlx::raw_sql("DEALLOCATE measured")
        .execute(&mut *tx)
        .await
        .unwrap();
    plan[0]["Plan"].clone()
}

#[tokio::test]
async fn the_stager_and_the_rescuer_read_what_they_change_not_the_table() {
    // They feed the claim: due scheduled and retryable rows become available, and running
    // rows whose lease ran out become retryable. A generic plan (a connection's statement
    // after its fifth execution) once matched the rows they change with a scan of the whole
    // table: every row, on every poll of every worker.
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    fill(
        pool,
        40_000,
        "a.later",
        "scheduled",
        "now() + interval '30 days'",
    )
    .await;
    fill(
        pool,
        5_000,
        "a.due",
        "scheduled",
        "now() - interval '1 hour'",
    )
    .await;
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, state, run_at, attempt, lock_token,
                               locked_until, locked_by)
         SELECT 'a.expired', 'default', '{}', 'running', now() - interval '1 hour', 1,
                gen_random_uuid(), now() - interval '1 minute' + g * interval '1 millisecond',
                'gone-worker'
         FROM generate_series(1, 5000) g",
    )
    .execute(pool)
    .await
    .unwrap();
    // Leases of another kind that have not run out: the rescuer passes them by.
    live_leases(pool, 5_000, "a.busy").await;
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();
    for mode in ["force_generic_plan", "force_custom_plan"] {
        let mut tx = pool.begin().await.unwrap();
        let staged = rows_read(&explain_prepared(&mut tx, mode, STAGE, "(integer)", "(100)").await);
        // As its first try runs it (migration 0044: giving `UntilStarted` keys back).
        let rescue = function_statement(&mut tx, "job.rescue_expired(integer)", &["in_limit"])
            .await
            .replace("give_key_back", "true");
        let rescued =
            rows_read(&explain_prepared(&mut tx, mode, &rescue, "(integer)", "(100)").await);
        let changed: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state::text, count(*) FROM job.jobs
             WHERE state IN ('available', 'retryable') GROUP BY 1 ORDER BY 1",
        )
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(
            changed,
            vec![("available".to_owned(), 100), ("retryable".to_owned(), 100)],
            "{mode}"
        );
        assert!(
            staged <= 3.0 * 100.0 + 10.0 && rescued <= 3.0 * 100.0 + 10.0,
            "{mode}: the stager read {staged} rows and the rescuer {rescued} to change 100 each"
        );
    }
}

/// The stager reads the due rows, not the queues: 3,000 queues holding one job due next month
/// each (per-tenant queues; or rows a role that may only enqueue made, due in 9999) cost its
/// pass nothing. Before migration 0047 it probed each of them on every pass of every worker.
#[tokio::test]
async fn the_stager_reads_the_due_rows_not_the_queues_waiting_for_later() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, state, run_at)
         SELECT 'a.later', 'tenant-' || g, '{}', 'scheduled', now() + interval '30 days'
         FROM generate_series(1, 3000) g",
    )
    .execute(pool)
    .await
    .unwrap();
    fill(pool, 100, "a.due", "retryable", "now() - interval '1 hour'").await;
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();
    for mode in ["force_generic_plan", "force_custom_plan"] {
        let mut tx = pool.begin().await.unwrap();
        let plan = explain_prepared(&mut tx, mode, STAGE, "(integer)", "(1000)").await;
        let staged: i64 =
            sqlx::query_scalar("SELECT count(*) FROM job.jobs WHERE state = 'available'")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(staged, 100, "{mode}");
        let read = rows_read(&plan);
        assert!(
            read <= 3.0 * 100.0 + 10.0,
            "{mode}: the stager read {read} rows to stage 100 among 3,000 queues"
        );
    }
}

/// The stager's statement, as the store sends it.
const STAGE: &str = include_str!("../job-postgres/src/sql/stage.sql");

/// The statement a PL/pgSQL function runs (its `RETURN QUERY`), as the database holds it, with
/// its arguments (`names`, in order) as `$1`, `$2`, ...; and the function's own settings
/// (`SET` clauses other than search_path, such as `enable_bitmapscan = off`) applied to the
/// transaction, so that the statement is planned as the function plans it.
async fn function_statement(tx: &mut sqlx::PgConnection, function: &str, names: &[&str]) -> String {
    let (source, config): (String, Option<Vec<String>>) =
        sqlx::query_as("SELECT prosrc, proconfig FROM pg_proc WHERE oid = $1::regprocedure")
            .bind(function)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    for setting in config.unwrap_or_default() {
        let (name, value) = setting.split_once('=').unwrap();
        if name != "search_path" {
            sqlx::query("SELECT set_config($1, $2, true)")
                .bind(name)
                .bind(value)
                .execute(&mut *tx)
                .await
                .unwrap();
        }
    }
    let start = source
        .find("RETURN QUERY")
        .unwrap_or_else(|| panic!("{function} returns a query"))
        + 12;
    // The query's own semicolon ends its line (one in a comment does not).
    let end = start
        + source[start..]
            .find(";\n")
            .expect("the query ends with a semicolon");
    let mut statement = source[start..end].to_owned();
    for (i, name) in names.iter().enumerate() {
        statement = statement.replace(name, &format!("${}", i + 1));
    }
    statement
}

#[tokio::test]
async fn claims_and_stage_passes_are_never_jit_compiled() {
    // On a large table job.claim's generic plan is estimated above jit_above_cost, and every
    // claim spent 35 ms compiling (migration 0024). The functions on the claim and stage path
    // turn JIT off for themselves, and the worker's own connections for their session.
    let db = TestDb::new().await;
    let store = db.store();
    let configs: Vec<(String, Vec<String>)> = sqlx::query_as(
        "SELECT p.oid::regprocedure::text, coalesce(p.proconfig, '{}')
         FROM pg_proc p
         WHERE p.pronamespace = 'job'::regnamespace
           AND p.proname IN ('claim', 'dependencies_resolve', 'ordering_wake_up',
                             'ordering_promote')
         ORDER BY 1",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(configs.len(), 4, "{configs:?}");
    for (function, config) in &configs {
        assert!(
            config.iter().any(|c| c == "jit=off"),
            "{function} runs with {config:?}"
        );
    }
    let worker = store.dedicated("test worker", 2);
    let jit: String = sqlx::query_scalar("SELECT current_setting('jit')")
        .fetch_one(worker.pool())
        .await
        .unwrap();
    assert_eq!(jit, "off", "the worker's own connections");
    worker.close().await;
}

#[tokio::test]
async fn the_rescuer_takes_every_kinds_expired_leases_oldest_first_in_batches() {
    // The rescuer walks the running rows kind by kind (jobs_rescue_idx is keyed by kind):
    // every kind's expired leases are taken, each kind's oldest first, never more than the
    // batch, and never a live lease.
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    for (kind, expired) in [("r.a", 3), ("r.b", 5), ("r.c", 2)] {
        // Row g expired g minutes ago: within a kind, a higher id expired longer ago.
        sqlx::query(
            "INSERT INTO job.jobs (kind, queue, payload, state, attempt, lock_token,
                                   locked_until, locked_by)
             SELECT $1, 'default', '{}', 'running', 1, gen_random_uuid(),
                    CASE WHEN g <= $2 THEN now() - g * interval '1 minute'
                         ELSE now() + interval '1 hour' END,
                    'w'
             FROM generate_series(1, $2 + 2) g",
        )
        .bind(kind)
        .bind(expired)
        .execute(pool)
        .await
        .unwrap();
    }
    let mut passes: Vec<Vec<(String, i64)>> = Vec::new();
    loop {
        let before: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM job.jobs WHERE state = 'retryable'")
                .fetch_all(pool)
                .await
                .unwrap();
        let rescued = store.rescue_expired(4).await.unwrap();
        assert!(
            rescued.retried <= 4,
            "a pass took {rescued:?} with a batch of 4"
        );
        if rescued.retried == 0 {
            break;
        }
        let taken: Vec<(String, i64)> = sqlx::query_as(
            "SELECT kind, id FROM job.jobs
             WHERE state = 'retryable' AND NOT id = ANY($1) ORDER BY kind, id",
        )
        .bind(&before)
        .fetch_all(pool)
        .await
        .unwrap();
        assert_eq!(taken.len() as u64, rescued.retried);
        passes.push(taken);
    }
    assert_eq!(
        passes.len(),
        3,
        "10 expired leases in batches of 4: {passes:?}"
    );
    let all: Vec<&(String, i64)> = passes.iter().flatten().collect();
    let per_kind = |k: &str| all.iter().filter(|(kind, _)| kind == k).count();
    assert_eq!(
        (per_kind("r.a"), per_kind("r.b"), per_kind("r.c")),
        (3, 5, 2)
    );
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job.jobs WHERE state = 'running' AND locked_until > now()",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(live, 6, "two live leases of each kind stay");
    // Oldest first within a kind: every lease taken in an earlier pass expired before every
    // lease of its kind taken in a later one.
    for (i, earlier) in passes.iter().enumerate() {
        for later in &passes[i + 1..] {
            for (kind, old) in earlier {
                for (_, new) in later.iter().filter(|(k, _)| k == kind) {
                    assert!(
                        old > new,
                        "{kind}: job {new} waited for a later pass than {old}, which expired \
                         after it: {passes:?}"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn a_schema_older_than_the_build_is_named_in_the_error() {
    // New workers deployed before the migration that adds a function they call: the error
    // says what to do, not only that a function does not exist.
    let db = TestDb::new().await;
    let store = db.store();
    sqlx::query("ALTER FUNCTION job.claim(text, text[], integer[], bigint[], integer, text, integer[], text[]) RENAME TO claim_gone")
        .execute(store.pool())
        .await
        .unwrap();
    let request = ClaimRequest {
        queue: "default".into(),
        kinds: vec![ClaimKind {
            kind: "a.kind".into(),
            max_version: 1,
            lease: std::time::Duration::from_secs(30),
            concurrency: None,
            rate: None,
        }],
        limit: 1,
        worker_id: "w".into(),
    };
    let error = store.claim(&request).await.unwrap_err();
    assert!(!error.is_refused(), "a deploy's gap passes: {error}");
    let text = error.to_string();
    assert!(
        text.contains("older than this build") && text.contains("migrate"),
        "{text}"
    );
    // A database never migrated: its claims say so too (it was the one case without a hint,
    // and the one a new user meets first).
    sqlx::query("DROP SCHEMA job CASCADE")
        .execute(store.pool())
        .await
        .unwrap();
    let text = store.claim(&request).await.unwrap_err().to_string();
    assert!(
        text.contains("never migrated") && text.contains("job migrate"),
        "{text}"
    );
    db.close().await;
}

/// The rate-limited claim's plan made while job.jobs was empty (a worker that polled an empty
/// queue: a connection's statement takes its generic plan after its fifth run) matched the
/// rows it picked through the partial queue index, whose available rows the empty table's
/// costs made look few, and read every available job of the kind to update 10 of them (20,583
/// rows of 20,000 jobs). The update goes by primary key whatever the statistics said.
#[tokio::test]
async fn a_rate_limited_claim_planned_on_an_empty_table_reads_what_it_takes_once_it_grew() {
    use sqlx::Connection;
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql(&format!(
        "SET plan_cache_mode = force_generic_plan;
         PREPARE rated (text, text, integer, bigint, integer, text, integer, bigint, integer)
         AS {}",
        CLAIM_RATED.trim_end().trim_end_matches(';')
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    // 10 jobs, at most 1,000 starts per key a minute.
    let args = "('default', 'r.k', 1, 30000, 10, 'worker-1', 1000, 60000, NULL)";
    let mut tx = conn.begin().await.unwrap();
    sqlx::query(CLAIM_LOCK)
        .bind(["r.k"])
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::raw_sql(&format!("EXECUTE rated {args}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, state, run_at, rate_key)
         SELECT 'r.k', 'default', '{}', 'available',
                now() - interval '1 hour' + g * interval '1 millisecond', 'tenant-' || (g % 40)
         FROM generate_series(1, 20000) g",
    )
    .execute(pool)
    .await
    .unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query(CLAIM_LOCK)
        .bind(["r.k"])
        .execute(&mut *tx)
        .await
        .unwrap();
    let (plan,): (Value,) = sqlx::query_as(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE rated {args}"
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let root = &plan[0]["Plan"];
    assert_eq!(root["Actual Rows"].as_f64(), Some(10.0), "{plan}");
    // Per key (40): its probe and what it could take, up to the claim's 10; the first 100
    // without a key; the 10 updated. Not the 20,000.
    let read = rows_read(root);
    assert!(read < 1_000.0, "read {read} rows of job.jobs: {plan}");
}
