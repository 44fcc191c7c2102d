//! Progress on long CLI work (a backup, an audit verification): a spinner
//! with the elapsed time on stderr, drawn only when stderr is a terminal,
//! so pipes, files and journald get the result lines alone.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A spinner saying `what` while the work runs; hidden unless stderr is a
/// terminal. Call [`ProgressBar::finish_and_clear`] when done.
pub(super) fn spinner(what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}
