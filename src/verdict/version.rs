//! Row 5c's rule: which etcd is about to start, and what its upgrade check
//! may refuse when the sources that name it disagree.
//!
//! `cmd::preflight` reads the sources (the Pod's image, `--etcd-version`, the
//! image's `etcd --version`); the policy over what they said is here.

use crate::disk::layout::Inspection;
use crate::disk::upgrade::{self, EtcdFlags, Target, UpgradeCheck};

/// The container of the Pod whose image is the etcd about to start (the
/// operator's name for it).
pub const ETCD_CONTAINER: &str = "etcd";

/// The etcd a check is for, where that was learnt, and a warning when the
/// sources disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AboutToStart {
    /// The version the upgrade check is for.
    pub target: Target,
    /// Where it was read: the image, `--etcd-version`, or a binary's path.
    pub from: String,
    /// The sources disagree in a way that does not change the check.
    pub warning: Option<String>,
    /// `--etcd-version` when it names another line than the image's tag: the
    /// check runs for both, and refuses only what blocks for both.
    pub disagreeing: Option<Target>,
}

/// The version of the etcd about to start, when the image or `--etcd-version`
/// names it: the tag of the `etcd` container's image when it reads as a 3.x
/// version and no digest pins the image (what the kubelet starts: an
/// `ETCD_VERSION` left behind by an image rollback is a warning; when the two
/// name different lines the check runs for both, since a tag is not always
/// etcd's version — a wrapper image's own), else `--etcd-version`. `None`: ask
/// the image's binary. `image`: the image reference and its tag.
pub fn about_to_start(image: Option<(&str, &str)>, given: Option<Target>) -> Option<AboutToStart> {
    let from_image = image.and_then(|(img, tag)| {
        Target::parse(tag)
            .filter(|t| t.major == 3)
            .map(|t| (t, img))
    });
    let Some((target, img)) = from_image else {
        return given.map(|t| AboutToStart {
            target: t,
            from: "--etcd-version".into(),
            warning: None,
            disagreeing: None,
        });
    };
    let line = |t: Target| (t.major, t.minor);
    let disagreeing = given.filter(|g| line(*g) != line(target));
    let warning = given
        .filter(|g| line(*g) != line(target) || g.patch.is_some_and(|p| Some(p) != target.patch))
        .map(|g| {
            format!(
                "ETCD_VERSION (--etcd-version) says {g} but this Pod's {ETCD_CONTAINER} container runs {img}: \
                 the upgrade check is for {target}, the image's version (update ETCD_VERSION)"
            )
        });
    Some(AboutToStart {
        target,
        from: format!("the {ETCD_CONTAINER} container's image {img}"),
        warning,
        disagreeing,
    })
}

/// The upgrade check for the etcd about to start, and a warning. When the
/// image's tag and `--etcd-version` name different lines one of them is wrong
/// (an `ETCD_VERSION` left behind, or a tag that is a wrapper image's own
/// version): only what etcd of both would refuse is refused. A start etcd
/// itself then refuses costs a crash loop; a wrong refusal costs the member.
pub fn check(
    dir: &Inspection,
    about: &AboutToStart,
    flags: &EtcdFlags,
) -> (UpgradeCheck, Option<String>) {
    let (target, from) = (about.target, &about.from);
    let mut check = upgrade::check(dir, target, flags);
    check.from = Some(from.clone());
    let Some(given) = about.disagreeing.filter(|_| check.blocked) else {
        return (check, about.warning.clone());
    };
    let mut other = upgrade::check(dir, given, flags);
    if other.blocked {
        return (check, about.warning.clone());
    }
    let codes: Vec<&str> = check.blockers().map(|f| f.code).collect();
    let warning = format!(
        "{from} reads as etcd {target}, for which the upgrade check blocks ({}), but ETCD_VERSION (--etcd-version) says {given}, for which nothing blocks: the start is not refused on a version the two disagree on; if the container really runs {target}, set ETCD_VERSION={target}",
        codes.join(", ")
    );
    other.from = Some(format!(
        "--etcd-version (the image's tag, {target}, disagrees)"
    ));
    (other, Some(warning))
}
