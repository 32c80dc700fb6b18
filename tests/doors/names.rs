//! One name rule (kinds, queues, tags, tenants) in Rust and in SQL, with the same words, at
//! every door: no whitespace, control or format characters.

use job::Enqueue;
use job_core::NewJob;
use job_core::{allowed_in_name, name_problem};
use job_testkit::TestDb;
use serde_json::json;

use crate::support::*;

/// Names the issue found accepted by one door and refused by another, or by none.
const BAD: &[&str] = &[
    "no\u{a0}break",      // non-breaking space: SQL took it, Rust did not
    "new\nline",          // a raw INSERT took it in a kind
    "tab\tqueue",         // ... and in a queue
    "has space\n",        // WorkerBuilder took it as a queue
    "zero\u{200b}width",  // zero-width space: every door took it
    "rlo\u{202e}txt.exe", // right-to-left override
    "\u{feff}bom",
    "tag\u{e0041}char",
    "soft\u{ad}hyphen",
];

#[tokio::test]
async fn bad_names_are_refused_at_every_door_with_the_same_words() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let store = db.store();
    for name in BAD {
        let problem = name_problem(name).unwrap_or_else(|| panic!("{name:?} passes in Rust"));
        let sql: Option<String> = sqlx::query_scalar("SELECT job.name_problem($1)")
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(sql.as_deref(), Some(problem.as_str()), "{name:?}");
        let quoted = literal(name);

        // kind
        let job = NewJob::new(*name, "{}");
        assert_eq!(
            named_by_store(&store, job.clone()).await,
            "kind",
            "{name:?}"
        );
        assert_eq!(named(job_postgres::enqueue(&pool, &job).await), "kind");
        refused_by_sql(
            &pool,
            &format!("SELECT job.enqueue({quoted}, '{{}}')"),
            "22023",
            "kind",
        )
        .await;
        refused_by_sql(
            &pool,
            &format!("INSERT INTO job.jobs (kind, payload) VALUES ({quoted}, '{{}}')"),
            "23514",
            "kind",
        )
        .await;

        // queue, tenant, tags
        let any = || Enqueue::new(AnyPayload(json!({})));
        assert_eq!(named(any().queue(*name).enqueue(&pool).await), "queue");
        assert_eq!(named(any().tenant(*name).enqueue(&pool).await), "tenant");
        assert_eq!(named(any().tags(["ok", name]).enqueue(&pool).await), "tags");
        for (argument, value) in [
            ("queue", quoted.clone()),
            ("tenant", quoted.clone()),
            ("tags", format!("ARRAY['ok', {quoted}]")),
        ] {
            refused_by_sql(
                &pool,
                &format!("SELECT job.enqueue('doors.any', '{{}}', {argument} => {value})"),
                "22023",
                argument,
            )
            .await;
            refused_by_sql(
                &pool,
                &format!(
                    "INSERT INTO job.jobs (kind, payload, {argument}) VALUES ('doors.any', '{{}}', {value})"
                ),
                "23514",
                argument,
            )
            .await;
        }

        // the worker's queues and its id: a queue no enqueue can fill is refused at build
        let built = job::Worker::builder(store.clone())
            .register::<AnyPayload>()
            .queue(*name, 1)
            .build();
        match built {
            Err(job::BuildError::InvalidOption { option, reason }) => {
                assert_eq!(option, "queue", "{name:?}");
                assert!(reason.contains(&problem), "{name:?}: {reason}");
            }
            other => panic!("{name:?} accepted as a queue: {:?}", other.err()),
        }
        let built = job::Worker::builder(store.clone())
            .register::<AnyPayload>()
            .queue("default", 1)
            .id(*name)
            .build();
        assert!(
            matches!(
                built,
                Err(job::BuildError::InvalidOption { option: "id", .. })
            ),
            "{name:?} accepted as a worker id"
        );
    }
    assert_eq!(rows(&pool).await, 0, "nothing was written");
    db.close().await;
}

#[tokio::test]
async fn the_sql_and_rust_name_rules_agree_on_every_code_point() {
    let db = TestDb::new().await;
    let refused_by_sql: Vec<i32> = sqlx::query_scalar(
        "SELECT cp FROM generate_series(1, 1114111) cp
         WHERE (cp < 55296 OR cp > 57343) AND job.name_problem('a' || chr(cp)) IS NOT NULL
         ORDER BY cp",
    )
    .fetch_all(&db.pool())
    .await
    .unwrap();
    let refused_by_rust: Vec<i32> = (1..=0x10FFFFu32)
        .filter_map(char::from_u32)
        .filter(|&c| !allowed_in_name(c))
        .map(|c| u32::from(c) as i32)
        .collect();
    assert_eq!(refused_by_sql, refused_by_rust);
    db.close().await;
}

#[tokio::test]
async fn names_of_any_script_and_the_longest_name_pass_every_door() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let longest = "q".repeat(128);
    for name in [
        "mail.send",
        "ü-queue",
        "очередь",
        "キュー",
        "emoji-📬",
        longest.as_str(),
    ] {
        assert_eq!(name_problem(name), None);
        Enqueue::new(AnyPayload(json!({})))
            .queue(name)
            .tenant(name)
            .tags([name])
            .enqueue(&pool)
            .await
            .unwrap();
        sqlx::query("SELECT job.enqueue($1, '{}', queue => $1, tenant => $1, tags => ARRAY[$1])")
            .bind(name)
            .execute(&pool)
            .await
            .unwrap();
    }
    let too_long = "q".repeat(129);
    assert_eq!(
        named(
            Enqueue::new(AnyPayload(json!({})))
                .queue(&too_long)
                .enqueue(&pool)
                .await
        ),
        "queue"
    );
    assert_eq!(rows(&pool).await, 12);
    db.close().await;
}

/// A hand-written job whose kind no door accepts any more.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Invisible {}

impl job::Job for Invisible {
    const KIND: &'static str = "send\u{200b}mail";
    async fn perform(self, _: job::JobContext) -> Result<(), job::JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_worker_refuses_to_register_a_kind_no_enqueue_can_fill() {
    let db = TestDb::new().await;
    let built = job::Worker::builder(db.store())
        .register::<Invisible>()
        .queue("default", 1)
        .build();
    match built {
        Err(job::BuildError::InvalidOption {
            option: "kind",
            reason,
        }) => {
            assert!(reason.contains("U+200B at character 5"), "{reason}")
        }
        Err(other) => panic!("expected a refused kind, got {other}"),
        Ok(_) => panic!("expected a refused kind, the worker was built"),
    }
    db.close().await;
}
