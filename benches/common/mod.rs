//! What every bench binary shares: the flags cargo passes to it.

/// `cargo bench` runs a bench binary with `--bench` (and a filter, for harnessed benches);
/// these binaries take it and ignore it.
#[derive(Debug, clap::Args)]
pub struct CargoBench {
    #[arg(long, hide = true)]
    pub bench: bool,
}
