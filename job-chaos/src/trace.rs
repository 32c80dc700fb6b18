//! A minimal `tracing` subscriber: every event at INFO or above becomes one line on stdout,
//! with the wall-clock time and the fields of the spans it happened in (the runtime's `job`
//! span names the job and attempt). Each line is written at once, so a killed worker's log
//! is complete up to its death.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use chrono::Utc;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Installs the subscriber for the whole process.
pub(crate) fn install() {
    let _ = tracing::subscriber::set_global_default(Lines::default());
}

#[derive(Default)]
struct Lines {
    next: AtomicU64,
    /// Rendered fields and reference count of every open span.
    spans: Mutex<HashMap<u64, (String, usize)>>,
}

thread_local! {
    static ENTERED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl Lines {
    fn spans(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (String, usize)>> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Subscriber for Lines {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = String::new();
        span.record(&mut Fields(&mut fields));
        self.spans().insert(id, (fields, 1));
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some((fields, _)) = self.spans().get_mut(&span.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let mut line = format!(
            "{} {} {}:",
            Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ"),
            meta.level(),
            meta.target()
        );
        ENTERED.with(|entered| {
            let spans = self.spans();
            for id in entered.borrow().iter() {
                if let Some((fields, _)) = spans.get(id) {
                    line.push_str(fields);
                }
            }
        });
        line.push_str(" |");
        event.record(&mut Fields(&mut line));
        line.push('\n');
        let _ = std::io::stdout().lock().write_all(line.as_bytes());
    }

    fn enter(&self, span: &Id) {
        ENTERED.with(|entered| entered.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        ENTERED.with(|entered| {
            let mut entered = entered.borrow_mut();
            if let Some(at) = entered.iter().rposition(|id| *id == span.into_u64()) {
                entered.remove(at);
            }
        });
    }

    fn clone_span(&self, span: &Id) -> Id {
        if let Some((_, refs)) = self.spans().get_mut(&span.into_u64()) {
            *refs += 1;
        }
        span.clone()
    }

    fn try_close(&self, span: Id) -> bool {
        let mut spans = self.spans();
        let id = span.into_u64();
        match spans.get_mut(&id) {
            Some((_, refs)) if *refs > 1 => {
                *refs -= 1;
                false
            }
            Some(_) => {
                spans.remove(&id);
                true
            }
            None => false,
        }
    }
}
