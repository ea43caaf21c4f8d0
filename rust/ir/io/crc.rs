//! The CRC-32 that ends every `.fxir` file. Its own file because it is a
//! self-contained algorithm (slicing-by-8 tables built at compile time) with a
//! test of its own against the bitwise definition.

/// Slicing-by-8 tables of the reflected IEEE CRC-32 (polynomial 0xEDB88320).
const CRC_TABLES: [[u32; 256]; 8] = crc_tables();

const fn crc_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// The CRC-32 of `bytes` (IEEE 802.3 / zlib / PNG: reflected polynomial
/// 0xEDB88320, initial value and final xor 0xFFFFFFFF); `crc32(b"123456789")`
/// is `0xCBF43926`. This is the checksum that ends every `.fxir` file.
#[must_use]
pub fn crc32(bytes: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut c = !0u32;
    let chunks = bytes.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        if let [b0, b1, b2, b3, b4, b5, b6, b7] = *chunk {
            let lo = u32::from_le_bytes([b0, b1, b2, b3]) ^ c;
            let hi = u32::from_le_bytes([b4, b5, b6, b7]);
            c = t[7][(lo & 0xff) as usize]
                ^ t[6][((lo >> 8) & 0xff) as usize]
                ^ t[5][((lo >> 16) & 0xff) as usize]
                ^ t[4][(lo >> 24) as usize]
                ^ t[3][(hi & 0xff) as usize]
                ^ t[2][((hi >> 8) & 0xff) as usize]
                ^ t[1][((hi >> 16) & 0xff) as usize]
                ^ t[0][(hi >> 24) as usize];
        }
    }
    for &b in rest {
        c = t[0][((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut slow = !0u32;
        for &b in &data {
            slow ^= u32::from(b);
            for _ in 0..8 {
                slow = if slow & 1 != 0 {
                    0xEDB8_8320 ^ (slow >> 1)
                } else {
                    slow >> 1
                };
            }
        }
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 999, 1000] {
            let mut c = !0u32;
            for &b in &data[..len] {
                c ^= u32::from(b);
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        0xEDB8_8320 ^ (c >> 1)
                    } else {
                        c >> 1
                    };
                }
            }
            assert_eq!(crc32(&data[..len]), !c, "len {len}");
        }
        assert_eq!(crc32(&data), !slow);
    }
}
