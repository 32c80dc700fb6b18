//! A public job in a crate that denies missing docs: the payload, its fields and its helpers
//! are documented by the macro.
#![deny(missing_docs, warnings)]

/// The jobs of this crate.
pub mod jobs {
    use job::{job, JobContext, JobError};

    /// Sends an invoice email.
    #[job(retry = 5, timeout = "2m", queue = "mail")]
    pub async fn send_invoice(
        ctx: JobContext,
        invoice_id: i64,
        resend: bool,
    ) -> Result<(), JobError> {
        let _ = (ctx, invoice_id, resend);
        Ok(())
    }

    /// Visible in the crate only.
    #[job]
    pub(crate) async fn audit(_ctx: JobContext, entry: String) -> Result<(), JobError> {
        let _ = entry;
        Ok(())
    }
}

fn main() {
    use job::Job;
    let payload = jobs::SendInvoice {
        invoice_id: 42,
        resend: false,
    };
    assert_eq!(payload.invoice_id, 42);
    assert_eq!(jobs::SendInvoice::OPTIONS.max_attempts, 6);
    let _ = payload
        .clone()
        .schedule_in(std::time::Duration::from_secs(60))
        .priority(1);
    let _ = format!("{payload:?}");
    let _ = jobs::Audit { entry: "x".into() }.max_attempts(2);
}
