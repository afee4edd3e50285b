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
    fn the_node_backup_limit_is_a_size_or_nothing() {
        assert_eq!(node_backup_limit(""), Ok(None));
        assert_eq!(node_backup_limit(" 10Gi "), Ok(Some(10 << 30)));
        assert_eq!(node_backup_limit("500M"), Ok(Some(500_000_000)));
        for bad in ["0", "ten", "-1Gi", "1e3"] {
            assert!(node_backup_limit(bad).is_err(), "{bad}");
        }
    }
}
