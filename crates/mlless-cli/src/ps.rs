//! `mlless ps`: the hybrid parameter server, a long-running server a user starts on a VM. Thin:
//! the server is `mlless_store::ps::PsServer`.

use anyhow::Context;
use clap::Args;
use mlless_store::ps::{self, PsLimits, PsServer};

/// Options of `mlless ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Where to listen, host:port; 0.0.0.0:PORT to take functions' connections from other
    /// machines (the default takes only this machine's).
    #[arg(long, value_name = "ADDR", default_value_t = format!("127.0.0.1:{}", ps::DEFAULT_PORT))]
    pub listen: String,
    /// Largest request the server reads, in bytes (a message and its header); larger ones are
    /// refused.
    #[arg(long, value_name = "BYTES", default_value_t = PsLimits::default().max_frame_bytes)]
    pub max_frame_bytes: u64,
    /// Most bytes one job may hold on the server (its messages and keys).
    #[arg(long, value_name = "BYTES", default_value_t = PsLimits::default().max_job_bytes)]
    pub max_job_bytes: u64,
    /// Most bytes the server holds in all (every job's, and the requests being read).
    #[arg(long, value_name = "BYTES", default_value_t = PsLimits::default().max_total_bytes)]
    pub max_total_bytes: u64,
}

/// Runs `mlless ps` until it is interrupted: the secret from `MLLESS_PS_SECRET`, or a random one
/// printed on standard output with the URL clients give (`--channel ps://:SECRET@ADDR`).
pub fn run(args: PsArgs) -> anyhow::Result<()> {
    let (secret, drawn) = match std::env::var(ps::SECRET_ENV) {
        Ok(secret) if !secret.is_empty() => (secret, false),
        _ => (ps::random_secret(), true),
    };
    let limits = PsLimits {
        max_frame_bytes: args.max_frame_bytes,
        max_job_bytes: args.max_job_bytes,
        max_total_bytes: args.max_total_bytes,
        ..PsLimits::default()
    };
    let runtime = crate::runtime()?;
    runtime.block_on(async {
        let server = PsServer::bind(&args.listen, &secret, limits)
            .await
            .context("starting the parameter server")?;
        let addr = server.local_addr();
        if drawn {
            println!("secret (no {} set): {secret}", ps::SECRET_ENV);
            println!("clients: --channel ps://:{secret}@{addr}");
        } else {
            println!(
                "clients: --channel ps://:${}@{addr} (the secret of {})",
                ps::SECRET_ENV,
                ps::SECRET_ENV
            );
        }
        println!("listening on {addr}");
        tokio::select! {
            served = server.serve() => served.context("the parameter server stopped"),
            interrupted = tokio::signal::ctrl_c() => {
                interrupted.context("waiting for Ctrl-C")?;
                println!("interrupted: stopping (every job's messages are dropped)");
                Ok(())
            }
        }
    })
}
