//! The binary: parse, start telemetry, dispatch (the one-shot commands in
//! `cmd`, the sidecar in `server`), and turn the outcome into the process's exit
//! status.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use etcd_member_agent::cli::{Cli, Command};
use etcd_member_agent::error::Error;
use etcd_member_agent::exit::Exit;
use etcd_member_agent::output;
use etcd_member_agent::{cmd, fleet, server};

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() {
        builder.init();
    } else {
        builder.json().flatten_event(true).init();
    }
}

/// A flag or env var clap refused (a malformed `AGENT_TIMEOUT`, say): in a Pod
/// the operator sees an init container only through its termination message,
/// so it says what was refused, as a configuration error (exit 2). The path
/// comes from `TERMINATION_LOG` alone: the flags could not be parsed.
fn explain_parse_error(e: &clap::Error) {
    let text = e.render().to_string();
    let reason = if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // The rendered text is the help, whose first line is the about text.
        "no command given"
    } else {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("the command line could not be parsed")
    };
    let reason = reason.strip_prefix("error: ").unwrap_or(reason);
    let msg = output::fitted_message(
        serde_json::Value::Null,
        Exit::Usage.code(),
        [None, None],
        reason,
        "fix the flags or environment variables (see --help)",
    );
    let path = std::env::var_os("TERMINATION_LOG")
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from);
    output::write_termination_message(path.as_deref(), &msg);
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(fleet::plugin_args(std::env::args_os())) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            explain_parse_error(&e);
            return Exit::Usage.into();
        }
        Err(e) => {
            // --help, --version.
            let _ = e.print();
            return Exit::Ok.into();
        }
    };
    init_tracing();
    let result = match &cli.command {
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Preflight(args) => cmd::preflight::run(args),
        Command::Restore(args) => cmd::restore::run(args),
        Command::Wipe(args) => cmd::wipe::run(args),
        Command::VerifyWipe(args) => cmd::wipe::run_verify(args),
        Command::Install(args) => cmd::install::run(args),
        Command::PodCheck(args) => cmd::pod_check::run(args),
        Command::Serve(args) => server::start::run(args),
        Command::Fleet(args) => fleet::run(args),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(e) => {
            match &e {
                Error::Usage(_) => eprintln!("etcd-member-agent: {e}"),
                Error::Internal(_) => {
                    tracing::error!(error = %e, "internal error");
                    eprintln!("etcd-member-agent: internal error: {e}");
                }
            }
            e.exit().into()
        }
    }
}
