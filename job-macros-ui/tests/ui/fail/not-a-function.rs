use job::job;

#[job(retry = 5)]
struct SendInvoice {
    invoice_id: i64,
}

fn main() {}
