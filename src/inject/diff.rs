//! A unified diff of two texts by lines (Myers' O(ND) algorithm), for
//! `inject --dry-run`: what `diff -u` would print, three lines of context.

/// One line of an edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Same(usize, usize),
    Del(usize),
    Add(usize),
}

/// The shortest edit script from `a` to `b` (Myers 1986, forward greedy with
/// a trace for the walk back).
fn script(a: &[&str], b: &[&str]) -> Vec<Line> {
    let n = a.len();
    let m = b.len();
    let max = n + m;
    let offset = max + 1;
    let mut v = vec![0usize; 2 * max + 3];
    let mut trace: Vec<Vec<usize>> = Vec::new();
    let mut found = false;
    for d in 0..=max {
        trace.push(v.clone());
        let d = d as isize;
        let mut k = -d;
        while k <= d {
            let idx = (k + offset as isize) as usize;
            let mut x = if k == -d || (k != d && v[idx - 1] < v[idx + 1]) {
                v[idx + 1]
            } else {
                v[idx - 1] + 1
            };
            let mut y = (x as isize - k) as usize;
            while x < n && y < m && a[x] == b[y] {
                x += 1;
                y += 1;
            }
            v[idx] = x;
            if x >= n && y >= m {
                found = true;
                break;
            }
            k += 2;
        }
        if found {
            break;
        }
    }
    // Walk back through the trace.
    let mut out = Vec::new();
    let (mut x, mut y) = (n as isize, m as isize);
    for d in (0..trace.len()).rev() {
        let v = &trace[d];
        let d = d as isize;
        let k = x - y;
        let idx = |k: isize| (k + offset as isize) as usize;
        let prev_k = if k == -d || (k != d && v[idx(k - 1)] < v[idx(k + 1)]) {
            k + 1
        } else {
            k - 1
        };
        let prev_x = v[idx(prev_k)] as isize;
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            x -= 1;
            y -= 1;
            out.push(Line::Same(x as usize, y as usize));
        }
        if d > 0 {
            if x == prev_x {
                y -= 1;
                out.push(Line::Add(y as usize));
            } else {
                x -= 1;
                out.push(Line::Del(x as usize));
            }
        }
        x = prev_x.max(0);
        y = prev_y.max(0);
    }
    out.reverse();
    out
}

/// `diff -u` of `a` and `b` with headers `--- from` and `+++ to`; empty when
/// they are equal.
pub fn unified(from: &str, to: &str, a: &str, b: &str) -> String {
    if a == b {
        return String::new();
    }
    let al: Vec<&str> = a.split_inclusive('\n').collect();
    let bl: Vec<&str> = b.split_inclusive('\n').collect();
    let ops = script(&al, &bl);
    const CONTEXT: usize = 3;
    let mut out = format!("--- {from}\n+++ {to}\n");
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, l)| !matches!(l, Line::Same(..)))
        .map(|(i, _)| i)
        .collect();
    let mut i = 0;
    while i < changed.len() {
        let start = changed[i].saturating_sub(CONTEXT);
        let mut end = changed[i];
        while i < changed.len() && changed[i] <= end + 2 * CONTEXT {
            end = changed[i];
            i += 1;
        }
        let end = (end + CONTEXT + 1).min(ops.len());
        let hunk = &ops[start..end];
        let a_start = hunk.iter().find_map(|l| match l {
            Line::Same(x, _) | Line::Del(x) => Some(*x),
            Line::Add(_) => None,
        });
        let b_start = hunk.iter().find_map(|l| match l {
            Line::Same(_, y) | Line::Add(y) => Some(*y),
            Line::Del(_) => None,
        });
        let a_len = hunk.iter().filter(|l| !matches!(l, Line::Add(_))).count();
        let b_len = hunk.iter().filter(|l| !matches!(l, Line::Del(_))).count();
        let pos = |s: Option<usize>, len: usize, before: usize| match s {
            Some(s) => s + 1,
            None if len == 0 => before,
            None => 1,
        };
        // For an empty side, the line before the hunk.
        let a_before = ops[..start]
            .iter()
            .filter(|l| !matches!(l, Line::Add(_)))
            .count();
        let b_before = ops[..start]
            .iter()
            .filter(|l| !matches!(l, Line::Del(_)))
            .count();
        out.push_str(&format!(
            "@@ -{},{a_len} +{},{b_len} @@\n",
            pos(a_start, a_len, a_before),
            pos(b_start, b_len, b_before)
        ));
        for l in hunk {
            let (mark, text) = match *l {
                Line::Same(x, _) => (' ', al[x]),
                Line::Del(x) => ('-', al[x]),
                Line::Add(y) => ('+', bl[y]),
            };
            out.push(mark);
            out.push_str(text);
            if !text.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insertions_show_as_diff_u_does() {
        let a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n";
        let b = "1\n2\n3\n4\n5\nnew\n6\n7\n8\n9\n10\n";
        assert_eq!(
            unified("a", "b", a, b),
            "--- a\n+++ b\n@@ -3,6 +3,7 @@\n 3\n 4\n 5\n+new\n 6\n 7\n 8\n"
        );
        assert_eq!(unified("a", "b", a, a), "");
    }

    #[test]
    fn far_apart_changes_are_separate_hunks() {
        let a: String = (1..=30).map(|i| format!("{i}\n")).collect();
        let b: String = (1..=30)
            .filter(|i| *i != 28)
            .map(|i| {
                if i == 2 {
                    "two\n".to_owned()
                } else {
                    format!("{i}\n")
                }
            })
            .collect();
        let d = unified("a", "b", &a, &b);
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
        assert!(d.contains("-2\n+two\n"), "{d}");
        assert!(d.contains("-28\n"), "{d}");
    }

    proptest::proptest! {
        #[test]
        fn the_script_turns_a_into_b(a in proptest::collection::vec("[abc]", 0..20), b in proptest::collection::vec("[abc]", 0..20)) {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            let b: Vec<&str> = b.iter().map(String::as_str).collect();
            let ops = script(&a, &b);
            let mut rebuilt = Vec::new();
            let mut from_a = Vec::new();
            for l in ops {
                match l {
                    Line::Same(x, y) => { proptest::prop_assert_eq!(a[x], b[y]); rebuilt.push(b[y]); from_a.push(a[x]); }
                    Line::Add(y) => rebuilt.push(b[y]),
                    Line::Del(x) => from_a.push(a[x]),
                }
            }
            proptest::prop_assert_eq!(rebuilt, b);
            proptest::prop_assert_eq!(from_a, a);
        }
    }
}
