use job::{job, JobContext};

// Every mistake is reported at once, those of the attribute and those of the function.
#[job(
    retry = 5,
    retry = 6,
    timeout = "soon",
    colour = "red",
    backoff(base = "1s", base = "2s")
)]
fn send<T>((_a, _b): (i32, i32), _ctx: JobContext, _name: &str) {}

fn main() {}
