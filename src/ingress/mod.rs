//! Webhook ingress (DESIGN.md §3): verify the provider's signature on the
//! raw bytes, then parse, claim, store and forward through the outbox.
//!
//! The order is fixed: authenticate, then parse, then claim. An
//! unauthenticated request reserves nothing and stores nothing. An accepted
//! event is stored, claimed, moved to `approved` and given its forward
//! effect in one transaction before the 2xx, so a workflow that is down
//! loses nothing.

pub mod accept;
mod delivery;
pub mod event;
pub mod port;
pub mod prepared;
pub mod signature;
pub mod source;

pub use accept::{AcceptError, Answer, Delivery, Intake, FORWARD_OPERATION};
pub use event::{RawEvent, RawStatus};
pub use prepared::{PreparedSource, Sources};
pub use source::{ConflictPolicy, InFlightPolicy, KeyTemplate, Locator, SchemeName, SourceConfig};
