//! A parameter may have its function's name: the generated `perform` still calls the function.
#![deny(warnings)]

use job::{job, JobContext, JobError, Outcome};

/// Sends one email to `email`.
#[job]
async fn email(_ctx: JobContext, email: String, times: u32) -> Result<(), JobError> {
    if email == "ada@example.com" && times == 2 {
        Ok(())
    } else {
        Err(JobError::terminal(format!("got {email} x{times}")))
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let job = Email {
        email: "ada@example.com".into(),
        times: 2,
    };
    let outcome = runtime.block_on(job_testkit::perform(job));
    assert!(matches!(outcome, Outcome::Complete), "{outcome:?}");
}
