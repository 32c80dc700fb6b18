use job::{job, JobContext};

#[job]
async fn nothing(_ctx: JobContext) {}

#[job]
async fn unit(_ctx: JobContext) -> () {}

#[job]
async fn option(_ctx: JobContext) -> Option<()> {
    None
}

fn main() {}
