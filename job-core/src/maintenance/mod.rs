//! Background services every worker runs beside its fetchers.

mod rescuer;

pub use rescuer::{Rescuer, RescuerConfig};
