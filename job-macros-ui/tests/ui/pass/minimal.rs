//! The least a job can be: no keys, no payload fields.
#![deny(warnings)]

use job::{job, Job, JobContext, JobError, JobOptions};

#[job]
async fn cleanup(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {
    assert_eq!(Cleanup::KIND, "cleanup");
    assert_eq!(Cleanup::VERSION, 1);
    assert_eq!(Cleanup::OPTIONS, JobOptions::DEFAULT);
    let json = job::__private::serde_json::to_string(&Cleanup {}).unwrap();
    assert_eq!(json, "{}");
    let _ = Cleanup {}.queue("other");
}
