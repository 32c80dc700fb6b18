//! The text fields of the pages' query strings and the actions' forms.

use crate::error::WebError;

/// Field `name`: trimmed, unset when empty, and refused (400, naming it) when it holds a NUL
/// character, which no kind, queue, tenant or tag can hold and PostgreSQL cannot take.
pub(crate) fn text(name: &str, value: &Option<String>) -> Result<Option<String>, WebError> {
    let Some(value) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if value.contains('\0') {
        return Err(WebError::bad_request(format!(
            "`{name}` holds a NUL character, which no name can hold"
        )));
    }
    Ok(Some(value.to_owned()))
}
