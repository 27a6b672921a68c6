//! `inspect`: placeholder until the reader lands.
use crate::cli::InspectArgs;
use crate::exit::Exit;

/// Runs `inspect`.
pub fn run(_args: &InspectArgs) -> anyhow::Result<Exit> {
    Ok(Exit::Usage)
}
