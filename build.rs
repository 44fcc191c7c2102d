//! Rebuilds the crate when a migration is added or changed.
//!
//! `sqlx::migrate!` embeds `migrations/` at compile time, and Cargo reruns
//! a proc macro only when a source file it knows changes: a new migration
//! is a new file, so without this an incremental build keeps migrating to
//! the schema of the last build. This is the build script sqlx's own
//! documentation recommends (`sqlx migrate build-script`).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
