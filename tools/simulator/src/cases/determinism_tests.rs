//! The same case run twice in one process gives the same statistics: nothing the handler's
//! pacing or the engine decides by (slice probes, holder names, the scan's id, the order of
//! instances, `select!`'s pick) may come from the machine's randomness or its clock.

use super::*;

fn params(args: &[&str]) -> Params {
    crate::params::parse(args).expect("valid parameters")
}

/// A count that the account refuses (so the scan learns a cap and its instances share it in
/// slices, probing them in an order their names seed), with the application beside it.
#[test]
fn a_case_run_twice_gives_the_same_statistics() {
    let case = Case {
        rows: Some(200_000),
        ..Case::parse("count-3.5m").unwrap()
    };
    // Four invocations an instance, so that the platform adds instances for the queue the
    // paced scan keeps (with 24, one instance kept up with it at 1,750 entities/s).
    let p = params(&[
        "--account-entities-per-second",
        "2000",
        "--app-load",
        "200",
        "--per-instance",
        "4",
    ]);
    let first = run(&case, DesignName::Tablescan, &p).unwrap();
    let second = run(&case, DesignName::Tablescan, &p).unwrap();
    assert!(
        first.stats.caps_learned > 0 && first.stats.peak_instances > 1,
        "the case should learn a cap and share it: {} caps, {} instances",
        first.stats.caps_learned,
        first.stats.peak_instances
    );
    assert_eq!(first.stats.rows_acted, 200_000);
    assert_eq!(format!("{:?}", first.stats), format!("{:?}", second.stats));
}
