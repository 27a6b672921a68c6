//! One module per subcommand, composing the reader, the evidence sources and the
//! verdict. Each returns the [`Exit`](crate::exit::Exit) it decided; printing is
//! done here, exiting only in `main`.

pub mod event;
pub mod inject;
pub mod inspect;
pub mod install;
pub mod pod_check;
pub mod preflight;
pub mod restore;
pub mod wipe;
