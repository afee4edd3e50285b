//! Kubernetes quantities of bytes (`1Gi`, `1536Mi`, `500M`), as specs and settings write
//! them.

/// A Kubernetes quantity in bytes, for comparing sizes written differently (1Gi, 1024Mi,
/// 1.5Gi, 1536Mi); None for a form not handled here (exponents, milli).
pub fn bytes(quantity: &str) -> Option<u128> {
    let quantity = quantity.trim();
    let split = quantity
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let factor: u128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
    let digits: u128 = format!("{whole}{fraction}").parse().ok()?;
    Some(digits.checked_mul(factor)? / scale)
}

/// Whether two Kubernetes quantities of any kind (`500m`, `0.5`, `1Gi`, `1e3`) name the same
/// amount, as the API server's canonical form of one is compared with what a spec wrote;
/// a form not read here compares as text.
pub fn same(a: &str, b: &str) -> bool {
    match (exact(a), exact(b)) {
        (Some((a_digits, a_scale)), Some((b_digits, b_scale))) => {
            // a_digits * 10^a_scale == b_digits * 10^b_scale, without overflow.
            let (low, low_scale, high, high_scale) = if a_scale <= b_scale {
                (a_digits, a_scale, b_digits, b_scale)
            } else {
                (b_digits, b_scale, a_digits, a_scale)
            };
            high_scale
                .checked_sub(low_scale)
                .and_then(|shift| u32::try_from(shift).ok())
                .and_then(|shift| 10u128.checked_pow(shift))
                .and_then(|factor| high.checked_mul(factor))
                .map_or(a == b, |high| high == low)
        }
        _ => a == b,
    }
}

/// A quantity as digits times a power of ten, binary suffixes multiplied out; None for a
/// negative or malformed one.
fn exact(quantity: &str) -> Option<(u128, i64)> {
    let quantity = quantity.trim().strip_prefix('+').unwrap_or(quantity.trim());
    let split = quantity
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let (factor, exponent): (u128, i64) = match suffix {
        "" => (1, 0),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            (1, exponent.parse().ok()?)
        }
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits: u128 = format!("{whole}{fraction}").parse().ok()?;
    let fraction_len = i64::try_from(fraction.len()).ok()?;
    Some((
        digits.checked_mul(factor)?,
        exponent.checked_sub(fraction_len)?,
    ))
}

/// Reads the settings' `nodeBackupLimit`: a quantity of bytes, or empty for no bound.
pub fn node_backup_limit(text: &str) -> Result<Option<u64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    bytes(text)
        .and_then(|bytes| u64::try_from(bytes).ok())
        .filter(|bytes| *bytes > 0)
        .map(Some)
        .ok_or_else(|| {
            format!("nodeBackupLimit is a size like 10Gi or 500M (or empty for none), not {text:?}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_written_differently_compare_equal() {
        assert_eq!(bytes("2G"), Some(2_000_000_000));
        assert_eq!(bytes("1.5Gi"), bytes("1536Mi"));
        assert_eq!(bytes("1e3"), None);
    }

    #[test]
    fn quantities_the_api_server_rewrites_compare_equal() {
        for (written, canonical) in [
            ("0.5", "500m"),
            ("1000m", "1"),
            ("1.5Gi", "1536Mi"),
            ("1e3", "1k"),
            ("129e6", "129M"),
            ("2048Ki", "2Mi"),
            ("+1", "1"),
        ] {
            assert!(same(written, canonical), "{written} {canonical}");
        }
        for (a, b) in [("1", "2"), ("500m", "5"), ("1Gi", "1G"), ("x", "1")] {
            assert!(!same(a, b), "{a} {b}");
        }
        assert!(same("x", "x"), "unread forms compare as text");
        // A tenant's exponents at i64's ends: compared, never overflowing.
        let (huge, tiny) = ("1e9223372036854775807", "1.5e-9223372036854775808");
        assert!(!same(huge, tiny) && !same(tiny, "1") && same(huge, huge));
    }

    #[test]
    fn the_node_backup_limit_is_a_size_or_nothing() {
        assert_eq!(node_backup_limit(""), Ok(None));
        assert_eq!(node_backup_limit(" 10Gi "), Ok(Some(10 << 30)));
        assert_eq!(node_backup_limit("500M"), Ok(Some(500_000_000)));
        for bad in ["0", "ten", "-1Gi", "1e3"] {
            assert!(node_backup_limit(bad).is_err(), "{bad}");
        }
    }
}
