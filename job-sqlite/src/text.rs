//! Text read back from the file whatever bytes a raw write left in it.
//!
//! Every text this store writes is UTF-8 (Rust strings), but SQLite does not check the encoding
//! of what another writer stores: `CAST(x'ff' AS TEXT)` goes into a `STRICT` table's TEXT
//! column, and no rule of the file's triggers can tell (SQLite has no UTF-8 check in SQL).
//! sqlx refuses to read such a value as a `String`, and one such row made every claim of its
//! kind, every rescue pass or every listing that met it fail. So what the store reads back goes
//! through [`Text`], which replaces the bytes that are not UTF-8 with U+FFFD, except a payload
//! that a handler is to run, which is checked instead (`lease::claim` discards the job).
//!
//! Hand-written: sqlx has no lossy text type, and its `Vec<u8>` decoding is what this uses.

use sqlx::sqlite::{SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Sqlite, Type};

/// A TEXT column's value, its bytes that are not UTF-8 replaced with U+FFFD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text(pub(crate) String);

impl Type<Sqlite> for Text {
    fn type_info() -> SqliteTypeInfo {
        <str as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <[u8] as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Sqlite> for Text {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let bytes = <&[u8] as Decode<Sqlite>>::decode(value)?;
        Ok(Text(String::from_utf8_lossy(bytes).into_owned()))
    }
}

impl From<Text> for String {
    fn from(text: Text) -> String {
        text.0
    }
}

/// Reads column `name` of `row` as [`Text`].
pub(crate) fn get(row: &sqlx::sqlite::SqliteRow, name: &str) -> Result<String, sqlx::Error> {
    sqlx::Row::try_get::<Text, _>(row, name).map(String::from)
}

/// Reads column `name` of `row`, which may be NULL, as [`Text`].
pub(crate) fn get_opt(
    row: &sqlx::sqlite::SqliteRow,
    name: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::Row::try_get::<Option<Text>, _>(row, name).map(|t| t.map(String::from))
}
