//! A failure's message reaches the logs as it reaches the history: cut to
//! `MAX_ERROR_MESSAGE` bytes, whatever its size (a panic's text went into the dead-letter
//! WARN line whole: 20,000,158 characters for a panic of 20 MB). So does a store's error,
//! whatever text the database put in it (a trigger's message, a constraint quoting a row).

use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState, Worker, MAX_ERROR_MESSAGE};
use job_testkit::TestDb;
use serde::{Deserialize, Serialize};

/// What each line of the text below repeats, so that the log lines holding it can be found.
const FILLER: &str = "yyyyyyyyyyyyyyyy";

/// Fails its only attempt with 2 MB of text: a panic, or a retryable error.
#[derive(Debug, Serialize, Deserialize)]
struct FailsHugely {
    panics: bool,
}

impl Job for FailsHugely {
    const KIND: &'static str = "doors.fails_hugely";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 1,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        let text = FILLER.repeat(2_000_000 / FILLER.len());
        if self.panics {
            panic!("{text}");
        }
        Err(JobError::retryable(text))
    }
}

#[tokio::test]
async fn a_huge_failure_message_is_logged_cut_as_it_is_stored() {
    let lines = crate::support::captured();
    let db = TestDb::new().await;
    let store = db.store();
    let worker = Worker::builder(store.clone())
        .register::<FailsHugely>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    let mut ids = Vec::new();
    for panics in [true, false] {
        ids.push(crate::common::enqueue(&store, FailsHugely { panics }).await);
    }
    for id in &ids {
        let row = crate::common::reaches(&store, *id, JobState::Discarded).await;
        let stored = &row.errors.last().expect("an error").message;
        assert!(stored.len() <= MAX_ERROR_MESSAGE, "{}", stored.len());
    }
    worker.shutdown().await;

    // Taken out of the capture: logging (the database's close below) locks it.
    let lines = lines.lock().unwrap().clone();
    let holding: Vec<&String> = lines.iter().filter(|l| l.contains(FILLER)).collect();
    let dead_letters = holding
        .iter()
        .filter(|l| l.contains("dead letter: the job was discarded"))
        .count();
    assert_eq!(
        dead_letters, 2,
        "each dead letter is logged with its message"
    );
    for line in holding {
        // The message, Debug-quoted, and the event's other fields.
        assert!(
            line.len() <= MAX_ERROR_MESSAGE + 512,
            "a log line of {} bytes: {}…",
            line.len(),
            &line[..300]
        );
    }
    db.close().await;
}

/// Records a step, then completes: the database refuses both with 2 MB of text.
#[derive(Debug, Serialize, Deserialize)]
struct RefusedHugely {
    step: bool,
}

impl Job for RefusedHugely {
    const KIND: &'static str = "doors.refused_hugely";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 1,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        if self.step {
            ctx.step("s", || async { Ok(1) }).await?;
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_store_error_holding_a_huge_text_is_logged_cut() {
    let lines = crate::support::captured();
    let db = TestDb::new().await;
    let store = db.store();
    // The application's own rule, whose refusal quotes 2 MB: of a step's record, and of the
    // completion of a job of this kind (which the completer then logs as refused, tries
    // alone, made storable, and discards as unstorable).
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION refuse_hugely() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF TG_TABLE_NAME = 'jobs' THEN
                 IF NEW.state <> 'completed' OR NEW.kind <> 'doors.refused_hugely' THEN
                     RETURN NEW;
                 END IF;
             END IF;
             RAISE EXCEPTION 'refused: %', repeat('{FILLER}', 2000000 / 16);
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_hugely BEFORE UPDATE ON job.jobs
             FOR EACH ROW EXECUTE FUNCTION refuse_hugely();
         CREATE TRIGGER refuse_hugely BEFORE INSERT ON job.steps
             FOR EACH ROW EXECUTE FUNCTION refuse_hugely();"
    ))
    .execute(store.pool())
    .await
    .unwrap();
    let worker = Worker::builder(store.clone())
        .register::<RefusedHugely>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    let stepped = crate::common::enqueue(&store, RefusedHugely { step: true }).await;
    let completed = crate::common::enqueue(&store, RefusedHugely { step: false }).await;
    let row = crate::common::reaches(&store, stepped, JobState::Discarded).await;
    assert_eq!(row.errors.last().unwrap().class, "step_unstorable");
    let row = crate::common::reaches(&store, completed, JobState::Discarded).await;
    assert_eq!(row.errors.last().unwrap().class, "unstorable");
    worker.shutdown().await;

    let lines = lines.lock().unwrap().clone();
    let holding: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(FILLER) && l.contains("refused: "))
        .collect();
    for what in [
        "step output cannot be stored",
        "outcome refused; trying it alone again",
        "outcome refused even made storable",
    ] {
        assert!(
            holding.iter().any(|l| l.contains(what)),
            "a line `{what}` quoting the refusal"
        );
    }
    for line in holding {
        assert!(
            line.len() <= MAX_ERROR_MESSAGE + 512,
            "a log line of {} bytes: {}…",
            line.len(),
            &line[..300]
        );
    }
    db.close().await;
}
