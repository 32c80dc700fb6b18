use job::{job, JobContext, JobError};

mod secrecy {
    pub struct SecretString(String);
}

#[job]
async fn charge(
    _ctx: JobContext,
    customer_id: i64,
    api_key: secrecy::SecretString,
    backup_keys: Option<Vec<secrecy::SecretString>>,
) -> Result<(), JobError> {
    let _ = (customer_id, api_key, backup_keys);
    Ok(())
}

fn main() {}
