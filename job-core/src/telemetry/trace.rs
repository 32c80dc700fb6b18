//! Tracing that crosses the queue. A job carries the W3C `traceparent` of the code that
//! enqueued it; each attempt runs in a `job` span that records it (`traceparent` field) and,
//! with the `opentelemetry` feature, is made a child of that remote span context, so one trace
//! shows the request, the enqueue and every attempt.

/// The length of a W3C `traceparent` header value (version 00): `vv-<32 hex>-<16 hex>-ff`.
pub const TRACEPARENT_LEN: usize = 55;

/// Whether `value` is a W3C `traceparent` of version 00 as this framework stores it:
/// lower-case hex, a trace id and a parent id that are not all zeros.
pub fn valid_traceparent(value: &str) -> bool {
    // The length first: a long text is refused before it is split.
    if value.len() != TRACEPARENT_LEN {
        return false;
    }
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    value.len() == TRACEPARENT_LEN
        && parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && nonzero(parts[1])
        && hex(parts[2], 16)
        && nonzero(parts[2])
        && hex(parts[3], 2)
}

/// The `traceparent` of the current `tracing` span's OpenTelemetry context: what an enqueue
/// stores with the job unless it is given one. `None` without the `opentelemetry` feature, or
/// when the current span is not part of an OpenTelemetry trace (no `tracing-opentelemetry`
/// layer installed, or no span).
pub fn current_traceparent() -> Option<String> {
    #[cfg(feature = "opentelemetry")]
    {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let cx = tracing::Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        if !sc.is_valid() {
            return None;
        }
        let value = format!(
            "00-{:032x}-{:016x}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        );
        valid_traceparent(&value).then_some(value)
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        None
    }
}

/// The span one attempt runs in: `job` with the job's kind, id, attempt and queue, and the
/// `traceparent` it was enqueued under; with the `opentelemetry` feature, a child of that
/// remote span.
pub(crate) fn attempt_span(
    kind: &str,
    id: i64,
    attempt: i32,
    queue: &str,
    traceparent: Option<&str>,
) -> tracing::Span {
    let span = tracing::info_span!(
        "job",
        kind = %kind,
        id,
        attempt,
        queue = %queue,
        traceparent = tracing::field::Empty,
    );
    if let Some(tp) = traceparent.filter(|tp| valid_traceparent(tp)) {
        span.record("traceparent", tp);
        #[cfg(feature = "opentelemetry")]
        join(&span, tp);
    }
    span
}

/// Makes `span` a child of the remote span `traceparent` names.
#[cfg(feature = "opentelemetry")]
fn join(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let parts: Vec<&str> = traceparent.split('-').collect();
    let (Ok(trace_id), Ok(span_id), Ok(flags)) = (
        TraceId::from_hex(parts[1]),
        SpanId::from_hex(parts[2]),
        u8::from_str_radix(parts[3], 16),
    ) else {
        return;
    };
    let remote = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::NONE,
    );
    // Fails only without a `tracing-opentelemetry` layer: then there is no trace to join.
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_checked() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(valid_traceparent(good));
        assert!(!valid_traceparent(&good.to_uppercase()));
        assert!(!valid_traceparent(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
        ));
        assert!(!valid_traceparent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        assert!(!valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"
        ));
        assert!(!valid_traceparent(""));
    }
}
