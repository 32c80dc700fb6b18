//! `SqliteStore` against the store conformance suite (`job_testkit::conformance`).

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_store_passes_the_conformance_suite() {
    job_testkit::conformance::run(job_testkit::SqliteFactory).await;
}
