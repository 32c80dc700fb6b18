//! The `job` binary against a real PostgreSQL: each test makes its own database (`TestDb`)
//! and runs the built binary with `DATABASE_URL` pointing at it.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use job_testkit::TestDb;
use serde_json::Value;

fn job(db: &TestDb, args: &[&str]) -> Output {
    job_with_input(db, args, "")
}

fn job_with_input(db: &TestDb, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_job"))
        .args(args)
        .env("DATABASE_URL", db.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the job binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "job failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn json(output: &Output) -> Value {
    serde_json::from_str(&ok(output)).expect("--json prints JSON")
}

/// Makes job `id` a dead letter as a worker would (discarded, one `terminal` error).
async fn discard(db: &TestDb, id: i64, message: &str) {
    sqlx::query(
        "UPDATE job.jobs SET state = 'discarded', attempt = 1, finalized_at = now(),
                errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(),
                         'class', 'terminal', 'message', $2::text))
         WHERE id = $1",
    )
    .bind(id)
    .bind(message)
    .execute(&db.pool())
    .await
    .unwrap();
}

fn enqueue(db: &TestDb, args: &[&str]) -> i64 {
    let mut all = vec!["--json", "enqueue"];
    all.extend_from_slice(args);
    json(&job(db, &all))["id"].as_i64().unwrap()
}

#[test]
fn a_command_line_it_cannot_read_exits_64_never_checks_2() {
    // `check` exits 2 for a queue that does not reconcile; a typo or a value of the wrong type
    // must not read as that to a monitor. No database is needed to refuse them.
    for args in [
        &["check", "--lease", "abc"][..],
        &["check", "--leese", "30s"],
        &["no-such-command"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_job"))
            .args(args)
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: clap says what is wrong");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_job"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
}

#[test]
fn migrate_print_writes_the_schema_script_without_a_database() {
    let out = Command::new(env!("CARGO_BIN_EXE_job"))
        .args(["migrate", "--print"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let script = ok(&out);
    assert_eq!(script, job_postgres::schema_script());
}

#[test]
fn without_a_database_url_it_says_how_to_give_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_job"))
        .arg("stats")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--database-url"));
}

#[tokio::test]
async fn migrate_enqueue_list_show_and_cancel() {
    let db = TestDb::new().await;
    ok(&job(&db, &["migrate"]));
    let id = enqueue(
        &db,
        &[
            "send_invoice",
            r#"{"invoice_id": 42}"#,
            "--queue",
            "mail",
            "--tag",
            "billing",
            "--tenant",
            "acme",
            "--in",
            "1h",
        ],
    );
    let listed = json(&job(&db, &["--json", "list", "--queue", "mail"]));
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id);
    assert_eq!(listed[0]["state"], "scheduled");
    assert_eq!(listed[0]["tags"][0], "billing");
    let table = ok(&job(&db, &["list", "--tag", "billing"]));
    assert!(
        table.contains("send_invoice") && table.contains("acme"),
        "{table}"
    );
    assert!(ok(&job(&db, &["list", "--kind", "other"])).contains("no matching jobs"));

    let shown = json(&job(&db, &["--json", "show", &id.to_string()]));
    assert_eq!(shown["job"]["payload"]["invoice_id"], 42);
    assert_eq!(shown["steps"].as_array().unwrap().len(), 0);
    let human = ok(&job(&db, &["show", &id.to_string()]));
    assert!(human.contains("\"invoice_id\": 42") && human.contains("error history: none"));

    let cancelled = json(&job(&db, &["--json", "cancel", &id.to_string()]));
    assert_eq!(cancelled["outcome"], "cancelled");
    let again = ok(&job(&db, &["cancel", &id.to_string()]));
    assert!(again.contains("already finished: cancelled"), "{again}");
    let missing = job(&db, &["cancel", "999999"]);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(job(&db, &["show", "999999"]).status.code(), Some(1));

    let refused = job(&db, &["enqueue", "k", "[1, 2]"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("payload"));
    db.close().await;
}

#[tokio::test]
async fn show_prints_the_error_history_and_recorded_steps() {
    let db = TestDb::new().await;
    let id = enqueue(&db, &["charge", r#"{"cents": 5}"#]);
    discard(&db, id, "card declined").await;
    sqlx::query("INSERT INTO job.steps (job_id, name, output, attempt) VALUES ($1, 'charge', '\"ch_1\"', 1)")
        .bind(id)
        .execute(&db.pool())
        .await
        .unwrap();
    let human = ok(&job(&db, &["show", &id.to_string()]));
    assert!(
        human.contains("terminal") && human.contains("card declined"),
        "{human}"
    );
    assert!(
        human.contains("charge") && human.contains("\"ch_1\""),
        "{human}"
    );
    let shown = json(&job(&db, &["--json", "show", &id.to_string()]));
    assert_eq!(shown["job"]["errors"][0]["class"], "terminal");
    assert_eq!(shown["steps"][0]["name"], "charge");
    assert_eq!(shown["steps"][0]["output"], "ch_1");
    db.close().await;
}

#[tokio::test]
async fn show_prints_a_completed_jobs_result() {
    let db = TestDb::new().await;
    let id = enqueue(&db, &["charge", r#"{"cents": 5}"#]);
    // Completed with a result, as a worker's finalize writes it.
    sqlx::query(
        "UPDATE job.jobs SET state = 'completed', attempt = 1, finalized_at = now(),
                result = '{\"charge_id\": \"ch_9\", \"cents\": 5}'
         WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    let human = ok(&job(&db, &["show", &id.to_string()]));
    assert!(
        human.contains("result:") && human.contains("\"charge_id\": \"ch_9\""),
        "{human}"
    );
    let shown = json(&job(&db, &["--json", "show", &id.to_string()]));
    assert_eq!(shown["job"]["result"]["charge_id"], "ch_9");
    db.close().await;
}

#[tokio::test]
async fn redrive_and_purge_dead_letters_purge_asking_first() {
    let db = TestDb::new().await;
    let a = enqueue(&db, &["charge", r#"{"cents": 1}"#]);
    let b = enqueue(&db, &["charge", r#"{"cents": 2}"#]);
    let c = enqueue(&db, &["charge", r#"{"cents": 3}"#, "--queue", "other"]);
    for id in [a, b, c] {
        discard(&db, id, "boom").await;
    }
    // Nothing named: refused rather than acting on every dead letter.
    assert!(!job(&db, &["redrive"]).status.success());
    // A dead letter was not cancelled: the command fails, saying how it ended.
    let finished = job(&db, &["cancel", &c.to_string()]);
    assert_eq!(finished.status.code(), Some(1));
    let said = String::from_utf8_lossy(&finished.stderr);
    assert!(
        said.contains("not cancelled: it already finished as discarded"),
        "{said}"
    );
    // A dead letter whose unique key an active job holds is skipped, and stays a dead letter:
    // the redrive fails too, naming it and its holder.
    let keyed = enqueue(&db, &["charge", "{}", "--unique-key", "k"]);
    discard(&db, keyed, "boom").await;
    let holder = enqueue(&db, &["charge", "{}", "--unique-key", "k"]);
    let skipped = job(&db, &["--json", "redrive", &keyed.to_string()]);
    assert_eq!(skipped.status.code(), Some(1));
    let out: Value = serde_json::from_slice(&skipped.stdout).unwrap();
    assert_eq!(out["skipped"][0]["id"], keyed);
    assert_eq!(out["skipped"][0]["held_by"], holder);
    ok(&job(&db, &["cancel", &holder.to_string()]));
    let out = json(&job(&db, &["--json", "redrive", &keyed.to_string()]));
    assert_eq!(out["redriven"][0], keyed);
    ok(&job(&db, &["cancel", &keyed.to_string()]));

    let out = json(&job(&db, &["--json", "redrive", &a.to_string()]));
    assert_eq!(out["redriven"][0], a);
    let listed = json(&job(&db, &["--json", "list", "--id", &a.to_string()]));
    assert_eq!(listed[0]["state"], "available");

    // Asked, and answered no: nothing purged.
    let no = job_with_input(&db, &["purge", "--queue", "default"], "n\n");
    assert_eq!(no.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&no.stderr).contains("Delete 1 dead letter(s)"));
    let dead = json(&job(&db, &["--json", "list", "--state", "discarded"]));
    assert_eq!(dead.as_array().unwrap().len(), 2);
    // No answer at all (no terminal): nothing purged either.
    assert_eq!(job(&db, &["purge", "--all"]).status.code(), Some(1));

    let yes = job_with_input(&db, &["purge", "--queue", "default"], "y\n");
    assert!(ok(&yes).contains("purged 1"));
    let all = json(&job(&db, &["--json", "purge", "--all", "--yes"]));
    assert_eq!(all["purged"], 1);
    let dead = json(&job(&db, &["--json", "list", "--state", "discarded"]));
    assert_eq!(dead.as_array().unwrap().len(), 0);
    db.close().await;
}

/// A purge that did not delete an id it was given fails and names it, as `redrive` does:
/// with `--yes`, asked first, and when nothing matched.
#[tokio::test]
async fn a_purge_that_leaves_a_named_id_fails_naming_it() {
    let db = TestDb::new().await;
    let dead = enqueue(&db, &["charge", "{}"]);
    let waiting = enqueue(&db, &["charge", "{}"]);
    discard(&db, dead, "boom").await;
    let (d, w, none) = (dead.to_string(), waiting.to_string(), "999999".to_owned());

    let out = job(&db, &["--json", "purge", "--yes", &w, &none]);
    assert_eq!(out.status.code(), Some(1));
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["purged"], 0);
    assert_eq!(said["not_purged"], serde_json::json!([waiting, 999999]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{w} was not purged: it is available, not a dead letter"
        )) && stderr.contains("999999 was not purged: no such job"),
        "{stderr}"
    );

    // Asked first, nothing matched: the same.
    let out = job_with_input(&db, &["purge", &w], "y\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no matching dead letters"));

    // Every named id purged: success.
    let out = json(&job(&db, &["--json", "purge", "--yes", &d]));
    assert_eq!(out["purged"], 1);
    assert_eq!(out["not_purged"], serde_json::json!([]));
    db.close().await;
}

#[tokio::test]
async fn pause_resume_paused_and_stats() {
    let db = TestDb::new().await;
    enqueue(&db, &["send_invoice", "{}", "--queue", "mail"]);
    enqueue(&db, &["send_invoice", "{}", "--queue", "mail"]);
    enqueue(&db, &["build_report", "{}"]);
    assert!(ok(&job(&db, &["pause", "--queue", "mail"])).contains("queue mail: paused"));
    assert!(ok(&job(&db, &["pause", "--queue", "mail"])).contains("already paused"));
    ok(&job(&db, &["pause", "--kind", "build_report"]));
    assert!(
        !job(&db, &["pause"]).status.success(),
        "--queue or --kind is required"
    );
    let paused = json(&job(&db, &["--json", "paused"]));
    assert_eq!(paused.as_array().unwrap().len(), 2);
    assert_eq!(paused[0]["paused_by"], "operator", "{paused}");
    assert_eq!(paused[0]["resume_at"], serde_json::Value::Null);
    let listed = ok(&job(&db, &["paused"]));
    assert!(listed.contains("operator"), "{listed}");

    let stats = json(&job(&db, &["--json", "stats"]));
    let mail = stats["counts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["queue"] == "mail")
        .unwrap();
    assert_eq!(mail["state"], "available");
    assert_eq!(mail["count"], 2);
    assert_eq!(stats["dead_letters"], 0);
    let table = ok(&job(&db, &["stats"]));
    assert!(table.contains("mail (paused)"), "{table}");
    assert!(table.contains("kind build_report is paused"), "{table}");
    // A paused queue without jobs has no row to mark: said on its own line.
    ok(&job(&db, &["pause", "--queue", "empty"]));
    let table = ok(&job(&db, &["stats"]));
    assert!(table.contains("queue empty is paused"), "{table}");
    assert!(!table.contains("queue mail is paused"), "{table}");
    ok(&job(&db, &["resume", "--queue", "empty"]));
    let only = json(&job(&db, &["--json", "stats", "--kind", "build_report"]));
    assert_eq!(only["counts"].as_array().unwrap().len(), 1);

    ok(&job(&db, &["resume", "--queue", "mail"]));
    assert!(ok(&job(&db, &["resume", "--queue", "mail"])).contains("was not paused"));
    ok(&job(&db, &["resume", "--kind", "build_report"]));
    assert!(ok(&job(&db, &["paused"])).contains("nothing is paused"));

    // A name no queue or kind can have: refused, naming the option, nothing paused.
    let long = "q".repeat(200);
    for (args, says) in [
        (
            ["pause", "--queue", "has space"],
            "--queue must not contain whitespace",
        ),
        (
            ["pause", "--kind", long.as_str()],
            "--kind must be at most 128 bytes",
        ),
        (["resume", "--queue", ""], "--queue must not be empty"),
    ] {
        let out = job(&db, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(ok(&job(&db, &["paused"])).contains("nothing is paused"));

    // A pause written by hand under such a name before the table refused it (migration
    // 0065): listed, and resumed by name.
    sqlx::raw_sql(
        "ALTER TABLE job.pauses DISABLE TRIGGER pauses_names;
         INSERT INTO job.pauses (scope, name) VALUES ('queue', 'has space');
         ALTER TABLE job.pauses ENABLE TRIGGER pauses_names;",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    assert!(ok(&job(&db, &["paused"])).contains("has space"));
    assert!(ok(&job(&db, &["resume", "--queue", "has space"])).contains("resumed"));
    assert!(ok(&job(&db, &["paused"])).contains("nothing is paused"));
    db.close().await;
}

/// Producers may put ids in queue names: `stats` groups thousands of queues in one pass, prints
/// the first 1,000 by name with each one's counts, says what the others hold, and `--json`
/// lists every queue.
#[tokio::test]
async fn stats_of_thousands_of_queues_shows_the_first_thousand_and_says_the_rest() {
    let db = TestDb::new().await;
    // Queue qNNNNN holds NNNNN % 3 + 1 available jobs, and a dead letter when NNNNN % 5 is 0.
    sqlx::query(
        "SELECT job.enqueue('k', '{}'::jsonb, queue => 'q' || lpad(g::text, 5, '0'))
         FROM generate_series(1, 2500) g, generate_series(1, 3) n
         WHERE n <= g % 3 + 1",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    sqlx::query(
        "SELECT job.enqueue('dead', '{}'::jsonb, queue => 'q' || lpad(g::text, 5, '0'))
         FROM generate_series(5, 2500, 5) g",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    sqlx::query(
        "UPDATE job.jobs SET state = 'discarded', attempt = 1, finalized_at = now(),
                errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(),
                         'class', 'terminal', 'message', 'boom'))
         WHERE kind = 'dead'",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    ok(&job(&db, &["pause", "--queue", "q00002"]));
    ok(&job(&db, &["pause", "--queue", "q02000"]));
    let available = |g: u64| g % 3 + 1;
    let dead = |g: u64| u64::from(g % 5 == 0);

    let table = ok(&job(&db, &["stats"]));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .filter(|l| l.starts_with("│ q0"))
        .map(|l| {
            l.split(['│', '┆'])
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 1000, "{table}");
    for (row, g) in rows.iter().zip(1u64..) {
        let name = format!("q{g:05}");
        let queue = if g == 2 {
            format!("{name} (paused)")
        } else {
            name
        };
        let expected: Vec<String> = [0, 0, available(g), 0, 0, 0, 0, dead(g)]
            .iter()
            .map(u64::to_string)
            .collect();
        assert_eq!(row[0], queue);
        assert_eq!(row[1..], expected, "{row:?}");
    }
    let rest: u64 = (1001..=2500).map(|g| available(g) + dead(g)).sum();
    assert!(
        table.contains(&format!(
            "… and 1500 more queue(s) not shown, holding {rest} job(s): the table shows the \
             first 1000 queues by name"
        )),
        "{table}"
    );
    // A paused queue past the table is said on its own line, as one without jobs is.
    assert!(table.contains("queue q02000 is paused"), "{table}");
    assert!(!table.contains("queue q00002 is paused"), "{table}");
    let all_dead: u64 = (1..=2500).map(dead).sum();
    assert!(
        table.contains(&format!("dead letters: {all_dead}")),
        "{table}"
    );

    let stats = json(&job(&db, &["--json", "stats"]));
    let counts = stats["counts"].as_array().unwrap();
    assert_eq!(counts.len(), 2500 + 500, "every queue and state");
    for c in counts {
        let g: u64 = c["queue"].as_str().unwrap()[1..].parse().unwrap();
        let n = match c["state"].as_str().unwrap() {
            "available" => available(g),
            "discarded" => dead(g),
            other => panic!("{other}"),
        };
        assert_eq!(c["count"], n, "{c}");
    }
    db.close().await;
}

/// `list --json` reads its rows a chunk at a time; the listing is still one array, in id order,
/// written as a whole array is.
#[tokio::test]
async fn list_json_of_many_jobs_is_one_array_in_order() {
    let db = TestDb::new().await;
    sqlx::query(
        "SELECT job.enqueue('bulk', jsonb_build_object('n', n, 'text', E'two\\nlines'))
         FROM generate_series(1, 40) AS n",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let out = job(&db, &["--json", "list", "--kind", "bulk", "--limit", "35"]);
    let text = ok(&out);
    let listed: Value = serde_json::from_str(&text).unwrap();
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 35);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["payload"]["n"], i + 1);
        assert_eq!(row["payload"]["text"], "two\nlines");
    }
    // Laid out as a whole array is, across the chunks' seams too.
    assert!(text.starts_with("[\n  {\n    \"id\": 1,\n"), "{text}");
    assert!(text.contains("\n  },\n  {\n    \"id\": 17,\n"), "{text}");
    assert!(text.ends_with("\n  }\n]\n"), "{text}");
    let none = ok(&job(&db, &["--json", "list", "--kind", "none"]));
    assert_eq!(none, "[]\n");
    db.close().await;
}

/// A row whose payload, result and progress nest deeper than serde_json reads (stored by SQL)
/// is listed and shown, the values as their text, and does not hide the dead letters.
#[tokio::test]
async fn list_and_show_read_a_value_nested_past_what_serde_json_reads() {
    let db = TestDb::new().await;
    let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('deep', $1::jsonb)")
        .bind(&deep)
        .fetch_one(&db.pool())
        .await
        .unwrap();
    discard(&db, id, "poison").await;
    sqlx::query("UPDATE job.jobs SET result = payload, progress = payload WHERE id = $1")
        .bind(id)
        .execute(&db.pool())
        .await
        .unwrap();
    let shown = ok(&job(&db, &["show", &id.to_string()]));
    assert!(shown.contains("[[[[[[[[[["), "{shown}");
    let listed = json(&job(&db, &["--json", "list", "--state", "discarded"]));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert!(
        listed[0]["payload"]
            .as_str()
            .is_some_and(|text| text.starts_with(r#"{"a": [[["#)),
        "{listed}"
    );
    assert!(ok(&job(&db, &["list"])).contains("deep"));
    db.close().await;
}

#[tokio::test]
async fn check_reconciles_and_flags_leases_no_rescuer_takes() {
    let db = TestDb::new().await;
    let id = enqueue(&db, &["charge", "{}"]);
    let dead = enqueue(&db, &["charge", "{}"]);
    discard(&db, dead, "boom").await;
    let clean = json(&job(&db, &["--json", "check"]));
    assert_eq!(clean["ok"], true);
    assert_eq!(clean["counts"]["available"], 1);
    assert_eq!(clean["dead_letters_by_class"]["terminal"], 1);
    assert!(ok(&job(&db, &["check"])).contains("ok: the queue reconciles"));

    // A running row whose lease expired ten minutes ago: no rescuer is running.
    sqlx::query(
        "UPDATE job.jobs SET state = 'running', attempt = 1, lock_token = gen_random_uuid(),
                locked_by = 'gone', locked_until = now() - interval '10 minutes' WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    let out = job(&db, &["check", "--lease", "30s"]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("PROBLEM: 1 running job(s) hold a lease that expired"),
        "{text}"
    );
    let report = serde_json::from_slice::<Value>(&job(&db, &["--json", "check"]).stdout).unwrap();
    assert_eq!(report["leases"]["expired"], 1);
    assert_eq!(report["leases"]["overdue"], 1);
    // With a lease longer than the expiry's age it is only expired: the rescuer's to take.
    let long = job(&db, &["--json", "check", "--lease", "1h"]);
    assert!(long.status.success());
    assert_eq!(clean["schema_lag"], Value::Null);
    db.close().await;
}

#[tokio::test]
async fn check_says_which_migration_the_workers_wait_for() {
    // A worker of this build waits for its migrations; the operator asking why nothing runs
    // is told by `check`.
    let db = TestDb::new().await;
    let last = job_postgres::MIGRATIONS.last().unwrap();
    sqlx::query("DELETE FROM job.schema_migrations WHERE version = $1")
        .bind(last.version)
        .execute(&db.pool())
        .await
        .unwrap();
    let out = job(&db, &["check"]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "PROBLEM: the job schema lacks migration {} `{}`",
            last.version, last.name
        )),
        "{text}"
    );
    assert!(text.contains("`job migrate`"), "{text}");
    let report = serde_json::from_slice::<Value>(&job(&db, &["--json", "check"]).stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["schema_lag"]["first_missing"], last.version);
    assert_eq!(report["schema_lag"]["missing"], 1);
    // Recorded again (what its migration would do): nothing to say.
    sqlx::query("INSERT INTO job.schema_migrations (version, name) VALUES ($1, $2)")
        .bind(last.version)
        .bind(last.name)
        .execute(&db.pool())
        .await
        .unwrap();
    assert!(job(&db, &["check"]).status.success());
    db.close().await;
}

/// Starts `job` with `args`, reads its stderr up to the purge prompt, and returns the child
/// waiting for an answer, with what it printed so far.
fn job_at_prompt(db: &TestDb, args: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_job"))
        .args(args)
        .env("DATABASE_URL", db.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the job binary runs");
    let stderr = child.stderr.as_mut().unwrap();
    let mut said = Vec::new();
    let mut byte = [0u8; 1];
    while !said.ends_with(b"[y/N] ") {
        let n = std::io::Read::read(stderr, &mut byte).unwrap();
        assert_eq!(n, 1, "no prompt: {}", String::from_utf8_lossy(&said));
        said.push(byte[0]);
    }
    (child, String::from_utf8(said).unwrap())
}

/// Answers the prompt of a child from `job_at_prompt`.
fn answer(mut child: std::process::Child, input: &str) -> Output {
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[tokio::test]
async fn purge_deletes_only_the_dead_letters_it_asked_about() {
    let db = TestDb::new().await;
    let shown = enqueue(&db, &["charge", "{}"]);
    let redriven = enqueue(&db, &["charge", "{}"]);
    let later = enqueue(&db, &["charge", "{}"]);
    discard(&db, shown, "boom").await;
    discard(&db, redriven, "boom").await;

    let (child, prompt) = job_at_prompt(&db, &["purge", "--queue", "default"]);
    assert!(prompt.contains("Delete 2 dead letter(s)"), "{prompt}");
    // While the operator reads: another job becomes a dead letter, one shown is redriven.
    discard(&db, later, "boom").await;
    sqlx::query("UPDATE job.jobs SET state = 'available', finalized_at = NULL WHERE id = $1")
        .bind(redriven)
        .execute(&db.pool())
        .await
        .unwrap();
    let out = answer(child, "y\n");
    // One it asked about could not be purged: said, and the exit code says so.
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("purged 1 dead letter(s)"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{redriven} was not purged: it is available, not a dead letter"
        )),
        "{stderr}"
    );
    let left = json(&job(&db, &["--json", "list"]));
    let left: Vec<(i64, &str)> = left
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_i64().unwrap(), j["state"].as_str().unwrap()))
        .collect();
    assert_eq!(left, [(redriven, "available"), (later, "discarded")]);
    db.close().await;
}

#[tokio::test]
async fn enqueue_stores_the_payload_numbers_as_given() {
    let db = TestDb::new().await;
    let id = enqueue(
        &db,
        &[
            "k",
            r#"{"a": 123456789012345678901234567890, "b": 18446744073709551616, "c": 0.10000000000000000555}"#,
        ],
    );
    let stored: String = sqlx::query_scalar("SELECT payload::text FROM job.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool())
        .await
        .unwrap();
    assert_eq!(
        stored,
        r#"{"a": 123456789012345678901234567890, "b": 18446744073709551616, "c": 0.10000000000000000555}"#
    );
    // And printed as stored, by `show`, `show --json` and `list --json`, the result, the
    // progress and a step's output too: read into serde_json values, `b` came back
    // 1.8446744073709552e19 and `c` 0.1.
    sqlx::query("UPDATE job.jobs SET result = payload, progress = '{\"d\": 1.50}' WHERE id = $1")
        .bind(id)
        .execute(&db.pool())
        .await
        .unwrap();
    // A step's output too (`show` and `show --json` print steps; `list` does not).
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt)
         SELECT id, 'fetch', payload, 1 FROM job.jobs WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    let exact = [
        "123456789012345678901234567890",
        "18446744073709551616",
        "0.10000000000000000555",
    ];
    let shown = ok(&job(&db, &["show", &id.to_string()]));
    let listed = ok(&job(&db, &["--json", "list", "--id", &id.to_string()]));
    let one = ok(&job(&db, &["--json", "show", &id.to_string()]));
    for (out, payloads) in [(&shown, 3), (&listed, 2), (&one, 3)] {
        for number in exact {
            assert_eq!(out.matches(number).count(), payloads, "{number} in {out}");
        }
        assert!(out.contains("1.50"), "{out}");
    }
    serde_json::from_str::<Value>(&listed).expect("list --json is JSON");
    serde_json::from_str::<Value>(&one).expect("show --json is JSON");
    // What is not JSON, or not one object, is still refused, naming the payload.
    for bad in [
        r#"{"a": }"#,
        r#"{"a": 1} x"#,
        "[1]",
        r#"{"a": "\u0000"}"#,
        r#"{"a": "\ud800"}"#,
        r#"{"a": 1e400}"#,
    ] {
        let out = job(&db, &["enqueue", "k", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}");
        assert!(stderr.contains("payload"), "{bad}: {stderr}");
    }
    db.close().await;
}

/// A full disk behind stdout is an error saying so (exit 1), not a panic (101), whatever the
/// command prints.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_stdout_that_cannot_be_written_is_an_error_not_a_panic() {
    let db = TestDb::new().await;
    let id = enqueue(&db, &["k", "{}"]).to_string();
    for args in [
        &["list", "--limit", "5"][..],
        &["--json", "list"],
        &["migrate", "--print"],
        &["stats"],
        &["--json", "stats"],
        &["show", &id],
        &["--json", "show", &id],
        &["check"],
        &["paused"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_job"))
            .args(args)
            .env("DATABASE_URL", db.url())
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("job: cannot write to stdout: No space left on device"),
            "{args:?}: {stderr}"
        );
    }
    // An enqueue's job is in the queue even when its id cannot be printed: said with the id,
    // so that a script does not enqueue it again.
    for args in [
        &["enqueue", "k", "{}"][..],
        &["--json", "enqueue", "k", "{}"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_job"))
            .args(args)
            .env("DATABASE_URL", db.url())
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let enqueued: i64 = sqlx::query_scalar("SELECT max(id) FROM job.jobs")
            .fetch_one(&db.pool())
            .await
            .unwrap();
        assert_eq!(
            stderr,
            format!(
                "job: job {enqueued} was enqueued, but its id could not be printed: cannot \
                 write to stdout: No space left on device (os error 28)\n"
            ),
            "{args:?}"
        );
    }
    db.close().await;
}

/// `--help` and `--version` into a full disk fail as any output does: exit 1, said on stderr,
/// never the success a script would read as "printed".
#[cfg(target_os = "linux")]
#[test]
fn help_and_version_that_cannot_be_written_are_an_error() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["--version"],
        &["-V"],
        &["help"],
        &["help", "check"],
        &["list", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_job"))
            .args(args)
            .env_remove("DATABASE_URL")
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr, "job: cannot write to stdout: No space left on device (os error 28)\n",
            "{args:?}"
        );
    }
}

/// An error said to a standard error that cannot be written (a full disk) ends the command
/// with its own exit code, not a panic (101): `eprintln!` panics when its write fails.
#[cfg(target_os = "linux")]
#[test]
fn an_error_that_cannot_be_said_keeps_its_exit_code() {
    for (args, code) in [
        (&["stats", "--kind", ""][..], 1),
        (&["--timeout", "0s", "stats"], 1),
        (&["list", "--limit", "x"], 64),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_job"))
            .args(args)
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .stderr(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}");
    }
}

/// Stored text a terminal would act on (escape sequences, C1 controls, bidirectional
/// overrides) is shown escaped in tables and text, and exact in `--json`.
#[tokio::test]
async fn show_and_list_escape_control_characters_from_stored_data() {
    let db = TestDb::new().await;
    let key = "key\u{1b}]0;PWNED\u{7}\u{1b}[2J";
    let id = enqueue(
        &db,
        &["k", r#"{"a": "\u009b2J\u202e"}"#, "--unique-key", key],
    );
    discard(&db, id, "bad\u{1b}[31m red\r\u{202e}txt.exe").await;
    sqlx::query(
        "UPDATE job.jobs SET errors = jsonb_set(errors, '{0,class}', to_jsonb($2::text))
         WHERE id = $1",
    )
    .bind(id)
    .bind("class\u{1b}[1m\u{9b}")
    .execute(&db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt)
         VALUES ($1, $2, to_jsonb($3::text), 1)",
    )
    .bind(id)
    .bind("step\u{1b}[2K")
    .bind("out\u{9b}\u{7f}")
    .execute(&db.pool())
    .await
    .unwrap();
    let raw = |text: &str| {
        text.chars()
            .find(|&c| c != '\n' && (c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)))
    };
    let shown = ok(&job(&db, &["show", &id.to_string()]));
    assert_eq!(raw(&shown), None, "{shown:?}");
    for escaped in [
        r"key\u{1b}]0;PWNED\u{7}\u{1b}[2J",
        r"bad\u{1b}[31m red\r\u{202e}txt.exe",
        r"class\u{1b}[1m\u{9b}",
        r"step\u{1b}[2K",
        r"out\u{9b}\u{7f}",
        r"\u{9b}2J\u{202e}",
    ] {
        assert!(shown.contains(escaped), "{escaped} in {shown}");
    }
    let listed = ok(&job(&db, &["list"]));
    assert_eq!(raw(&listed), None, "{listed:?}");
    assert!(listed.contains(r"bad\u{1b}[31m red\r"), "{listed}");
    let exact = json(&job(&db, &["--json", "show", &id.to_string()]));
    assert_eq!(exact["job"]["unique_key"], key);
    assert_eq!(exact["job"]["errors"][0]["class"], "class\u{1b}[1m\u{9b}");
    assert_eq!(exact["steps"][0]["name"], "step\u{1b}[2K");
    db.close().await;
}

/// A database that cannot be reached is reported with its cause and where it was looked
/// for, not after the pool's 30 s as "pool timed out"; the password is not shown.
#[tokio::test]
async fn an_unreachable_database_is_reported_with_its_cause() {
    let db = TestDb::new().await;
    let options = db.connect_options();
    let missing = format!(
        "postgres://{}@{}:{}/job_cli_no_such_database",
        options.get_username(),
        options.get_host(),
        options.get_port()
    );
    for (url, says) in [
        (
            "postgres://postgres:hunter2@127.0.0.1:1/x".to_owned(),
            vec!["database `x` on 127.0.0.1:1", "refused"],
        ),
        (
            missing,
            vec!["database `job_cli_no_such_database`", "does not exist"],
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_job"))
            .args(["--database-url", &url, "stats"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        for said in says {
            assert!(stderr.contains(said), "{said} in {stderr}");
        }
        assert!(!stderr.contains("hunter2"), "{stderr}");
        assert!(!stderr.contains("timed out"), "{stderr}");
    }
    db.close().await;
}

/// Starts `job web` on a free port with `token` as `JOB_OPERATOR_TOKEN`, and returns it with
/// its address and its stderr, read up to the line saying where it serves. The caller kills
/// and waits for it (clippy does not follow the child into the returned tuple).
#[allow(clippy::zombie_processes)]
fn start_web(
    db: &TestDb,
    token: &str,
) -> (
    std::process::Child,
    String,
    std::io::BufReader<std::process::ChildStderr>,
) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_job"))
        .args(["web", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", db.url())
        .env("JOB_OPERATOR_TOKEN", token)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the job binary runs");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            child.wait().unwrap();
            panic!("job web did not start: {said}");
        }
        said.push_str(&line);
        if let Some(rest) = line.strip_prefix("job web: serving on http://") {
            let addr = rest.split('/').next().unwrap().to_owned();
            return (child, addr, stderr);
        }
    }
}

/// POSTs a login with `token` to the dashboard at `addr`; returns the whole response.
fn log_in(addr: &str, token: &str) -> String {
    use std::io::Read;
    let mut http = std::net::TcpStream::connect(addr).unwrap();
    let body = format!("token={token}");
    write!(
        http,
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    http.read_to_string(&mut response).unwrap();
    response
}

/// `job web` logs the dashboard's warnings to stderr: a wrong operator token is recorded.
#[tokio::test]
async fn web_logs_a_failed_login_to_stderr() {
    use std::io::Read;
    let db = TestDb::new().await;
    let (mut child, addr, mut stderr) = start_web(&db, "the-operator-token");
    let response = log_in(&addr, "wrong");
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    // The warning is written before the response is sent: all of it is in the pipe now.
    child.kill().unwrap();
    child.wait().unwrap();
    let mut said = String::new();
    stderr.read_to_string(&mut said).unwrap();
    assert!(
        said.contains("a login with a wrong operator token"),
        "{said}"
    );
    db.close().await;
}

/// The operator token from `JOB_OPERATOR_TOKEN` is trimmed, as the one from a file is.
#[tokio::test]
async fn web_trims_the_operator_token_from_the_environment() {
    let db = TestDb::new().await;
    let (mut child, addr, _stderr) = start_web(&db, " the-operator-token\n");
    let response = log_in(&addr, "the-operator-token");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(response.starts_with("HTTP/1.1 303"), "{response}");
    db.close().await;
}

/// A token short enough to guess from a session cookie offline is refused, saying why.
#[tokio::test]
async fn web_refuses_a_short_operator_token() {
    let db = TestDb::new().await;
    let out = Command::new(env!("CARGO_BIN_EXE_job"))
        .args(["web", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", db.url())
        .env("JOB_OPERATOR_TOKEN", "hunter2")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("the operator token has 7 characters, fewer than 16"),
        "{said}"
    );
    db.close().await;
}

/// Fails `args` and expects stderr to say `says` (exit 1).
fn refused(db: &TestDb, args: &[&str], says: &str) {
    let out = job(db, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
}

#[tokio::test]
async fn check_refuses_a_lease_over_the_maximum_duration() {
    let db = TestDb::new().await;
    for lease in ["18446744073709551615s", "99999999years", "1000years"] {
        refused(
            &db,
            &["check", "--lease", lease],
            "--lease must be at most 100 years",
        );
    }
    assert!(job(&db, &["check", "--lease", "36500days"])
        .status
        .success());
    db.close().await;
}

/// A lease no worker takes (under 30 ms: zero, a nanosecond) would call every lease overdue:
/// refused naming the option and the bound, as the worker refuses it.
#[tokio::test]
async fn check_refuses_a_lease_shorter_than_any_worker_takes() {
    let db = TestDb::new().await;
    for (lease, got) in [("0s", "got 0s"), ("1ns", "got 1ns"), ("29ms", "got 29ms")] {
        refused(
            &db,
            &["check", "--lease", lease],
            &format!("--lease must be at least 30ms (the shortest lease a worker takes), {got}"),
        );
    }
    assert!(job(&db, &["check", "--lease", "30ms"]).status.success());
    db.close().await;
}

#[tokio::test]
async fn web_refuses_a_tenant_no_job_can_have() {
    use std::io::{BufRead, BufReader};
    let db = TestDb::new().await;
    let long = "t".repeat(200);
    for (tenant, says) in [
        ("", "--tenant must not be empty"),
        ("a b", "--tenant must not contain whitespace"),
        (long.as_str(), "--tenant must be at most 128 bytes"),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_job"))
            .args(["web", "--listen", "127.0.0.1:0", "--tenant", tenant])
            .env("DATABASE_URL", db.url())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the job binary runs");
        let mut first = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        if first.contains("serving on") {
            // Started anyway: stopped before the assertion below fails.
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        assert!(first.contains(says), "{tenant:?}: {first}");
        assert_eq!(status.code(), Some(1), "{tenant:?}: {first}");
    }
    db.close().await;
}

#[tokio::test]
async fn list_limit_is_bounded_and_positive() {
    let db = TestDb::new().await;
    enqueue(&db, &["k", "{}"]);
    for limit in ["0", "10001", "4294967295"] {
        refused(
            &db,
            &["list", "--limit", limit],
            "--limit must be from 1 to 10000",
        );
    }
    let listed = json(&job(&db, &["--json", "list", "--limit", "10000"]));
    assert_eq!(listed.as_array().unwrap().len(), 1);
    db.close().await;
}

#[tokio::test]
async fn redrive_and_purge_limits_are_bounded_and_positive() {
    let db = TestDb::new().await;
    for command in [&["redrive", "--all"][..], &["purge", "--all", "--yes"]] {
        for limit in ["0", "10001", "4294967295"] {
            let args: Vec<&str> = command.iter().copied().chain(["--limit", limit]).collect();
            refused(&db, &args, "--limit must be from 1 to 10000");
        }
    }
    db.close().await;
}

#[tokio::test]
async fn cancel_of_a_missing_job_says_so_on_stderr() {
    let db = TestDb::new().await;
    let out = job(&db, &["cancel", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert!(String::from_utf8_lossy(&out.stderr).contains("job: no job 0"));
    let out = job(&db, &["--json", "cancel", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["outcome"], "not_found");
    db.close().await;
}

#[tokio::test]
async fn redrive_and_purge_say_why_each_named_id_was_left() {
    let db = TestDb::new().await;
    let dead = enqueue(&db, &["k", "{}"]);
    let waiting = enqueue(&db, &["k", "{}"]);
    let elsewhere = enqueue(&db, &["k", "{}", "--queue", "other"]);
    discard(&db, dead, "boom").await;
    discard(&db, elsewhere, "boom").await;
    let (dead_s, waiting_s, elsewhere_s) =
        (dead.to_string(), waiting.to_string(), elsewhere.to_string());
    let out = job(&db, &["redrive", &waiting_s, "999999"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{waiting} was not redriven: it is available, not a dead letter"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("999999 was not redriven: no such job"),
        "{stderr}"
    );
    // A dead letter named with a filter it fails: said so, not "not a dead letter" (redrive)
    // nor "run it again" (purge), which could never succeed.
    let redrive = ["redrive", &elsewhere_s, "--queue", "default"];
    let purge = ["purge", &elsewhere_s, "--queue", "default", "--yes"];
    for (args, verb, done) in [
        (&redrive[..], "redrive", "redriven"),
        (&purge[..], "purge", "purged"),
    ] {
        let out = job(&db, args);
        assert_eq!(out.status.code(), Some(1), "{verb}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "{elsewhere} was not {done}: it is a dead letter the --kind/--queue/--tenant/--tag given leave out"
            )),
            "{verb}: {stderr}"
        );
    }
    let out = job(&db, &["--json", "redrive", &dead_s, &waiting_s]);
    assert_eq!(out.status.code(), Some(1));
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["redriven"], serde_json::json!([dead]));
    assert_eq!(said["not_redriven"], serde_json::json!([waiting]));
    assert_eq!(
        said["not_dead_letters"], said["not_redriven"],
        "the older name kept"
    );
    db.close().await;
}

#[tokio::test]
async fn list_refuses_a_finalized_range_that_ends_before_it_starts() {
    let db = TestDb::new().await;
    refused(
        &db,
        &[
            "list",
            "--finalized-from",
            "2026-02-01T00:00:00Z",
            "--finalized-to",
            "2026-01-01T00:00:00Z",
        ],
        "--finalized-from (2026-02-01 00:00:00 UTC) must be before --finalized-to \
         (2026-01-01 00:00:00 UTC)",
    );
    db.close().await;
}

/// PostgreSQL answered `timestamp out of range` to a bound before 4713 BC: refused naming the
/// filter's field, before anything is read.
#[tokio::test]
async fn list_refuses_a_finalized_bound_outside_the_times_a_job_carries() {
    let db = TestDb::new().await;
    // Refused before connecting, naming the option as given (it was the store's refusal,
    // naming the filter's field).
    for (option, field) in [
        (
            "--finalized-from=-262143-01-01T00:00:00Z",
            "--finalized-from must be from 0001-01-01 to 9999-12-31 (UTC)",
        ),
        (
            "--finalized-to=+262142-12-31T00:00:00Z",
            "--finalized-to must be from 0001-01-01 to 9999-12-31 (UTC)",
        ),
    ] {
        refused(&db, &["list", option], field);
    }
    db.close().await;
}

/// An empty filter option would match nothing where leaving it out matches any
/// (`--queue "$QUEUE"` with `QUEUE` unset): refused naming it, before anything is read or
/// done. An enqueue option the framework refuses is named as the command line gave it.
#[tokio::test]
async fn empty_filters_and_refused_enqueue_options_name_the_option() {
    let db = TestDb::new().await;
    let dead = enqueue(&db, &["k", "{}"]);
    discard(&db, dead, "boom").await;
    for (args, says) in [
        (&["list", "--kind", ""][..], "--kind must not be empty"),
        (&["stats", "--queue", ""], "--queue must not be empty"),
        (&["redrive", "--tenant", " "], "--tenant must not be empty"),
        (&["purge", "--yes", "--tag", ""], "--tag must not be empty"),
        (
            &["enqueue", "k", "{}", "--queue", ""],
            "--queue must not be empty",
        ),
        (
            &["enqueue", "k", "{}", "--unique-key", ""],
            "--unique-key must be 1 to 512 bytes, got 0",
        ),
        (
            &["enqueue", "k", "{}", "--in", "1000years"],
            "--in must be under 100 years",
        ),
        (
            &["enqueue", "k", "{}", "--deadline-in", "1000years"],
            "--deadline-in must be under 100 years",
        ),
        (
            // The database's refusal (a deadline not after the run time it computes) too.
            &["enqueue", "k", "{}", "--deadline-in", "0s"],
            "job: --deadline-in ",
        ),
        (
            &["enqueue", "k", "{}", "--max-attempts", "0"],
            "--max-attempts must be at least 1, got 0",
        ),
        (
            &["enqueue", "k", "{}", "--tag", "a", "--tag", ""],
            "--tag number 2 must not be empty",
        ),
        (&["enqueue", "", "{}"], "the kind must not be empty"),
        (&["enqueue", "k", "[]"], "the payload must be a JSON object"),
    ] {
        refused(&db, args, says);
    }
    // The dead letter was neither redriven nor purged, and nothing was enqueued.
    let all = json(&job(&db, &["--json", "list"]));
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["state"], "discarded");
    // A state that is none says which are.
    let out = job(&db, &["list", "--state", "finished"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("'--state <STATES>': not a job state: one of pending, scheduled,"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    db.close().await;
}

/// A filter no kind, queue, tenant or tag can have (a control character, a space, 100 kB)
/// would match nothing: refused naming the option and the rule, the very words the enqueue
/// door refuses such a name with, before anything is read or done.
#[tokio::test]
async fn filters_no_name_can_match_are_refused_naming_the_option_and_the_rule() {
    let db = TestDb::new().await;
    let dead = enqueue(&db, &["k", "{}"]);
    discard(&db, dead, "boom").await;
    let long = "k".repeat(100_000);
    let control = "must not contain whitespace, control or format characters";
    for (args, says) in [
        (
            &["list", "--kind", "a\u{7}b"][..],
            format!("--kind {control} (U+0007 at character 2)"),
        ),
        (
            &["stats", "--kind", &long],
            "--kind must be at most 128 bytes, got 100000".to_owned(),
        ),
        (
            &["stats", "--queue", "mail\n"],
            format!("--queue {control} (U+000A at character 5)"),
        ),
        (
            &["list", "--tenant", "\u{202e}acme"],
            format!("--tenant {control} (U+202E at character 1)"),
        ),
        (
            &["redrive", "--tag", &long],
            "--tag must be at most 128 bytes, got 100000".to_owned(),
        ),
        (
            &["purge", "--yes", "--queue", "a b"],
            format!("--queue {control} (U+0020 at character 2)"),
        ),
    ] {
        refused(&db, args, &says);
        let out = job(&db, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("it would match nothing"),
            "{args:?}: {stderr}"
        );
        // The refused value is not repeated: 100 kB of it would bury the message.
        assert!(stderr.len() < 300, "{args:?}: {stderr}");
    }
    // The enqueue door's words for the same name.
    refused(
        &db,
        &["enqueue", "a\u{7}b", "{}"],
        &format!("the kind {control} (U+0007 at character 2)"),
    );
    // The dead letter was neither redriven nor purged.
    let all = json(&job(&db, &["--json", "list"]));
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["state"], "discarded");
    db.close().await;
}

/// `job web` closes a connection whose client sends part of a request's headers and then
/// nothing, and one left idle after a request (`serve::HEADER_TIMEOUT`, 10 s): it held such a
/// connection for as long as the client liked, and a client that opened them by the thousand
/// took every file descriptor of the process. Each read below is bounded at 60 s, so a server
/// that keeps the connection open fails the test rather than hanging it.
#[tokio::test]
async fn web_closes_connections_that_send_nothing_more() {
    use std::io::Read;
    let db = TestDb::new().await;
    let (mut child, addr, _stderr) = start_web(&db, "the-operator-token");
    let open = |request: &str| {
        let mut http = std::net::TcpStream::connect(&addr).unwrap();
        http.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        http.write_all(request.as_bytes()).unwrap();
        http
    };
    let half_sent = open("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    let idle = open(&format!("GET /login HTTP/1.1\r\nHost: {addr}\r\n\r\n"));
    let until_closed = |mut http: std::net::TcpStream| {
        std::thread::spawn(move || {
            let mut read = Vec::new();
            let ended = http.read_to_end(&mut read);
            (
                ended.map_err(|e| e.kind()),
                String::from_utf8_lossy(&read).into_owned(),
            )
        })
    };
    let (half_sent, idle) = (until_closed(half_sent), until_closed(idle));
    let (half_sent, idle) = (half_sent.join().unwrap(), idle.join().unwrap());
    let response = log_in(&addr, "the-operator-token");
    child.kill().unwrap();
    child.wait().unwrap();
    let (ended, said) = half_sent;
    assert!(
        ended.is_ok(),
        "the half-sent request's connection stayed open: {ended:?}"
    );
    assert!(!said.contains(" 200 "), "{said}");
    let (ended, said) = idle;
    assert!(ended.is_ok(), "the idle connection stayed open: {ended:?}");
    assert!(
        said.starts_with("HTTP/1.1 200"),
        "it answered the request first: {said}"
    );
    // And it still serves.
    assert!(response.starts_with("HTTP/1.1 303"), "{response}");
    db.close().await;
}

/// An operator token file that holds no token is an error, not a read-only dashboard: it
/// served read-only, saying so only in its first line.
#[tokio::test]
async fn web_refuses_an_empty_operator_token_file() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("job-cli-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "   \n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_job"))
        .args(["web", "--listen", "127.0.0.1:0", "--operator-token-file"])
        .arg(&file)
        .env("DATABASE_URL", db.url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the job binary runs");
    // A dashboard that serves instead never exits: bounded, then stopped and failed.
    let waited = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if waited.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("job web served with an empty operator token file");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("holds no operator token (it is empty or only whitespace)"),
        "{stderr}"
    );
    db.close().await;
}

/// `job stats` prints a line per pause without a row of the table to mark, at most as many
/// as the table's rows, then says how many more there are: 50,000 pauses printed 50,000
/// lines.
#[tokio::test]
async fn stats_shows_the_first_thousand_pauses_and_says_the_rest() {
    let db = TestDb::new().await;
    sqlx::query(
        "INSERT INTO job.pauses (scope, name) SELECT 'kind', 'k' || lpad(g::text, 4, '0')
         FROM generate_series(1, 1003) g",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let out = ok(&job(&db, &["stats"]));
    let lines: Vec<&str> = out.lines().filter(|l| l.ends_with(" is paused")).collect();
    assert_eq!(lines.len(), 1000, "{out}");
    assert!(
        out.contains("… and 3 more pause(s) not shown: `job paused` lists every pause"),
        "{out}"
    );
    let all = json(&job(&db, &["--json", "stats"]));
    assert_eq!(all["paused"].as_array().unwrap().len(), 1003);
    db.close().await;
}
