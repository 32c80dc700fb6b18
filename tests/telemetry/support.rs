//! A real metrics recorder for the whole test binary (`metrics-exporter-prometheus`, whose
//! reads do not reset what they read), and reading samples back from its scrape. Tests share
//! it: each uses queues and kinds of its own, so the samples it asserts are its own.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The recorder, installed on first use.
pub(crate) fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .install_recorder()
            .expect("no other recorder is installed in this test binary");
        job::describe_metrics();
        handle
    })
}

/// One sample of a scrape: name, labels (sorted), value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) value: f64,
}

/// Every sample of Prometheus text exposition `text`.
pub(crate) fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let mut labels: Vec<(String, String)> = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').expect("label=value");
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            labels.sort();
            Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().expect("a number"),
            }
        })
        .collect()
}

/// The value of the sample `name` with exactly `labels`, in the recorder's scrape now.
pub(crate) fn sample(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    want.sort();
    parse(&recorder().render())
        .into_iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}

/// Every sample of the recorder's scrape whose labels include `label`.
pub(crate) fn samples_with(label: (&str, &str)) -> Vec<Sample> {
    parse(&recorder().render())
        .into_iter()
        .filter(|s| s.labels.iter().any(|(k, v)| k == label.0 && v == label.1))
        .collect()
}

/// Polls `check` every 10 ms until it holds, failing with `what` after 20 s.
pub(crate) async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until job `id` is finished (completed, cancelled or discarded) and returns its row.
pub(crate) async fn finished_row(store: &job::PgStore, id: job::JobId) -> job::JobRow {
    use job::Store;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let row = store.get(id).await.unwrap().expect("the job exists");
        if row.state.is_terminal() {
            return row;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job {id} still {} after 20 s",
            row.state
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Job `job` (of queue `queue`) made a dead letter as a worker makes one (its handler must
/// fail terminally); returns its id. Each test has a kind of its own: the gauges are the
/// process's, and the tests run side by side.
pub(crate) async fn dead_letter<J: job::Job>(
    db: &job_testkit::TestDb,
    job: J,
    queue: &str,
) -> job::JobId {
    use job_testkit::TestWorker as _;
    let id = job::Enqueue::new(job).enqueue(&db.pool()).await.unwrap();
    let worker = job::Worker::builder(db.store())
        .register::<J>()
        .queue(queue, 1)
        .configure(|c| c.reporter.enabled = false)
        .for_tests()
        .build()
        .unwrap()
        .start();
    assert_eq!(
        finished_row(&db.store(), id).await.state,
        job::JobState::Discarded
    );
    worker.shutdown().await;
    id
}
