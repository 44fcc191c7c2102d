//! Webhook ingress (DESIGN.md §3): verify the provider's signature on the
//! raw bytes, then parse, claim, store and forward through the outbox.
//!
//! The order is fixed: authenticate, then parse, then claim. An
//! unauthenticated request reserves nothing and stores nothing. An accepted
//! event is stored, claimed, moved to `approved` and given its forward
//! effect in one transaction before the 2xx, so a workflow that is down
//! loses nothing.
//!
//! Every request leaves an entry ([`log`]): verified ones in the
//! deliveries log in the database, unauthenticated ones only in a bounded
//! in-memory ring ([`refused`]). An operator forwards a `duplicate_of`
//! event anyway, or redelivers a stored one, through [`operator`].

pub mod accept;
mod delivery;
pub mod event;
pub mod log;
pub mod logbook;
pub mod operator;
pub mod port;
pub mod prepared;
mod record;
pub mod refused;
pub mod signature;
pub mod source;

pub use self::log::{DeliveryCriteria, DeliveryEntry, DeliveryFilter, DeliveryOutcome};
pub use accept::{AcceptError, Answer, Delivery, Intake, FORWARD_OPERATION};
pub use event::{RawEvent, RawStatus};
pub use logbook::Logbook;
pub use operator::{DeliveryActions, ForwardAsk, ForwardDone, ForwardError};
pub use prepared::{PreparedSource, Sources};
pub use refused::{Refused, RefusedRing};
pub use source::{ConflictPolicy, InFlightPolicy, KeyTemplate, Locator, SchemeName, SourceConfig};
