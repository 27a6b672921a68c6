//! Tests that cannot check their property on this machine. Outside CI they say
//! so loudly and return; under `CI=true` a skipped property is a failed test.

/// Whether the tests run in CI (`CI=true`), where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Says why the calling test cannot check its property here; the caller then
/// returns. Under `CI=true` it panics instead:
///
/// ```ignore
/// if !private_mounts {
///     skip("needs `unshare -m` (root) for a private /etc/resolv.conf");
///     return;
/// }
/// ```
#[track_caller]
pub fn skip(why: impl std::fmt::Display) {
    assert!(
        !in_ci(),
        "CI must run this test, but it would be skipped: {why}"
    );
    eprintln!("!!! SKIPPED: {why} !!!");
}
