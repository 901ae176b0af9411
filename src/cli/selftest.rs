//! `webgpu-amp selftest`: does this GPU compute correctly? Every op family forward and
//! backward against a CPU reference, in every storage the adapter runs (the library's
//! `selftest` module). Exit 0 when every check passes, 1 when one fails.

use std::collections::BTreeMap;

use clap::Args;
use webgpu_amp::selftest::{self, Check, FAMILIES, Report, STORAGES};

use super::DeviceArgs;
use super::out::outln;

#[derive(Args)]
pub struct SelftestArgs {
    #[command(flatten)]
    device: DeviceArgs,
    /// Print the report as JSON (every check with its error and tolerance).
    #[arg(long)]
    json: bool,
    /// Print every check, not one line per family and storage.
    #[arg(long)]
    verbose: bool,
    /// Make this family's CPU reference wrong, to see that a wrong result fails (tests).
    #[arg(long, hide = true, value_parser = FAMILIES.to_vec())]
    break_reference: Option<String>,
}

pub fn run(args: &SelftestArgs) -> webgpu_amp::Result<()> {
    let options = args.device.options()?;
    webgpu_amp::interrupt::install();
    let report = selftest::selftest(&options, args.break_reference.as_deref())?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).expect("selftest report serialises")
        )?;
    } else {
        print(&report, args.verbose)?;
    }
    let failed = report.failures().count();
    if report.passed() {
        Ok(())
    } else {
        Err(webgpu_amp::Error::Unsupported(format!(
            "selftest: {failed} of {} checks failed on `{}` ({})",
            report.checks.len(),
            report.adapter,
            report.backend
        )))
    }
}

fn print(report: &Report, verbose: bool) -> webgpu_amp::Result<()> {
    outln!("selftest on {} ({})", report.adapter, report.backend)?;
    // One line per family and storage: its checks and the worst error against its tolerance.
    let mut groups: BTreeMap<(usize, usize), Vec<&Check>> = BTreeMap::new();
    let order = |list: &[&str], x: &str| list.iter().position(|f| *f == x).unwrap_or(usize::MAX);
    for c in &report.checks {
        let key = (order(FAMILIES, c.family), order(STORAGES, c.storage));
        groups.entry(key).or_default().push(c);
    }
    for checks in groups.values() {
        let storage = checks[0].storage;
        let worst = checks
            .iter()
            .map(|c| c.error / c.tolerance)
            .fold(0.0f64, f64::max);
        let failed = checks.iter().filter(|c| !c.passed).count();
        outln!(
            "  {:<12} {:<11} {:>3} checks  worst error {:>5.1}% of its tolerance  {}",
            checks[0].family,
            storage,
            checks.len(),
            100.0 * worst,
            if failed == 0 {
                "ok".to_string()
            } else {
                format!("FAILED ({failed})")
            }
        )?;
        for c in checks.iter().filter(|c| verbose || !c.passed) {
            outln!(
                "      {:<34} error {:.3e} (tolerance {:.0e}){}",
                c.what,
                c.error,
                c.tolerance,
                if c.passed { "" } else { "  FAILED" }
            )?;
        }
    }
    for line in &report.not_run {
        outln!("  not run: {line}")?;
    }
    let failed = report.failures().count();
    outln!(
        "{} checks, {} failed{}",
        report.checks.len(),
        failed,
        if failed == 0 {
            ": this adapter computes every op family correctly"
        } else {
            ""
        }
    )
}
