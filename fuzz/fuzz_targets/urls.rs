//! URL lists (`--initial-advertise-peer-urls` and friends): the list parser,
//! normalisation, the comparable form and the member ID computed from them.
#![no_main]
use etcd_member_agent::disk::ids;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    let _ = ids::normalize_url(s);
    let _ = ids::comparable_url(s);
    if let Ok(urls) = ids::parse_urls(s) {
        let _ = ids::member_id(&urls, "token");
    }
});
