//! CRC-32C (Castagnoli): the checksum of every WAL record, of a `.snap` file and
//! of `HashKV`. Two implementations, one result: the `crc32c` crate (SSE4.2's
//! `crc32` instruction, three streams) is the faster for short inputs, and
//! `crc-fast` (carry-less multiplication, AVX-512 `VPCLMULQDQ` where the CPU has
//! it, chosen at run time) for long ones: 2.1× on 256 KiB and 1.9× on 512 bytes
//! on this project's EPYC machine, slower below about 300 bytes. The checksum
//! was 28 % of a warm `preflight`'s samples with `crc32c` alone, 14 % with
//! this split (`docs/performance.md`).

/// Inputs this long or longer go to `crc-fast`; shorter ones to `crc32c`.
/// Measured: the two are even at 256–384 bytes, `crc32c` 1.2× faster at 128
/// and `crc-fast` 1.9× faster at 512.
const LONG_BYTES: usize = 512;

/// The CRC-32C of `data` continued from `crc`, the checksum of what came
/// before it (0 for nothing), as Go's `crc32.Update(crc, castagnoli, data)` and
/// `crc32c::crc32c_append` compute it.
pub fn append(crc: u32, data: &[u8]) -> u32 {
    if data.len() < LONG_BYTES {
        return crc32c::crc32c_append(crc, data);
    }
    // crc-fast's state is the register before the final inversion, so a
    // running checksum continues from its complement.
    let mut digest =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    digest.finalize() as u32
}

/// The CRC-32C of `data`.
pub fn of(data: &[u8]) -> u32 {
    append(0, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both implementations agree at every length around the switch, at
    /// every alignment (a WAL record starts anywhere in the read buffer), from
    /// every kind of running checksum, on the standard check value and on
    /// bytes that are not a pattern. It checks the kernel `crc-fast` picks on
    /// the CPU it runs on (printed), not the others.
    #[test]
    fn both_implementations_give_one_checksum_at_every_length() {
        println!(
            "crc-fast: {}",
            crc_fast::get_calculator_target(crc_fast::CrcAlgorithm::Crc32Iscsi)
        );
        assert_eq!(of(b"123456789"), 0xe306_9283);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let bytes: Vec<u8> = (0..70_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let check = |at: usize, n: usize| {
            let data = &bytes[at..at + n];
            for seed in [0, 1, 0xffff_ffff, 0xdead_beef] {
                assert_eq!(
                    append(seed, data),
                    crc32c::crc32c_append(seed, data),
                    "length {n} at offset {at}, running checksum {seed:#x}"
                );
            }
        };
        for n in (0..LONG_BYTES).chain([65_536, 69_000]) {
            check(n % 7, n);
        }
        for n in (LONG_BYTES..1100).chain(4095..=4097) {
            for at in 0..64 {
                check(at, n);
            }
        }
        // A long input split anywhere continues to the checksum of the whole.
        let whole = of(&bytes);
        for cut in [1, 511, 512, 513, 40_000] {
            assert_eq!(append(of(&bytes[..cut]), &bytes[cut..]), whole, "cut {cut}");
        }
    }
}
