//! Wiping what key work leaves outside secret memory: dead stack frames
//! and vector registers. Reading a passphrase, running the KDF, unwrapping
//! a key and setting up ciphers all run on an ordinary stack, and compiled
//! code copies keys and spills round keys into its frames (the first two
//! AES-256 round keys are the key itself, the last decryption round key is
//! its first half); AES-NI and VAES code leaves round keys in vector
//! registers, which a signal frame or a later spill would write to the
//! stack again. `/proc/PID/mem` reads all of that; it cannot read secret
//! memory.

/// Bytes [`wipe_stack`] overwrites when it cannot tell how deep the stack
/// has grown (no `/proc`).
pub const FALLBACK_STACK_BYTES: usize = 1 << 20;

/// Bytes of stack [`wipe_request_stack`] overwrites.
pub const REQUEST_STACK_BYTES: usize = 32 * 1024;

/// Overwrites with zeros every byte the calling thread's stack has held
/// below the caller's frame, and clears the vector registers. "Every byte"
/// is down to the lowest address of the stack mapping the caller runs on
/// (from `/proc/self/maps`; the main thread's `[stack]` grows and never
/// shrinks, so that is as deep as it ever went), else
/// [`FALLBACK_STACK_BYTES`].
///
/// Call it right after the work that handled keys has returned, from the
/// frame that called it: inlined into that frame, it wipes every frame
/// that work used, however deep, and nothing that is still live.
#[inline(always)]
pub fn wipe_stack() {
    match stack_floor() {
        // SAFETY: floor is the lowest address of the mapping that holds
        // this thread's stack pointer, so [floor, sp) is this thread's own
        // stack below the live frames, which nothing else uses.
        Some(floor) => unsafe { arch::zero_below_sp(floor, arch::vector_level()) },
        None => {
            wipe_fixed::<FALLBACK_STACK_BYTES>();
            clear_vector_registers();
        }
    }
}

/// Overwrites [`REQUEST_STACK_BYTES`] of the stack below the caller with
/// zeros and clears the vector registers, after a request that ran keys
/// through the cipher code: AES and EME spill round keys into their stack
/// frames and leave them in registers. About a microsecond.
#[inline(never)]
pub fn wipe_request_stack() {
    wipe_fixed::<REQUEST_STACK_BYTES>();
    clear_vector_registers();
}

/// Zeros the vector registers (XMM/YMM/ZMM) of the calling thread. They
/// are caller-saved, so no live value is lost.
#[inline(never)]
pub fn clear_vector_registers() {
    arch::clear_vector_registers(arch::vector_level());
}

/// Zeros an array of `N` bytes in a frame right below the caller's: plain
/// Rust, for when the stack's extent is unknown, and cheap enough to run
/// after every request (a memset, kept by handing the area to `black_box`).
#[inline(never)]
fn wipe_fixed<const N: usize>() {
    let mut area = [0u8; N];
    area.fill(0);
    std::hint::black_box(&mut area);
}

/// The lowest address of the mapping that holds the calling thread's stack
/// pointer (an address in this frame stands for it).
#[inline(never)]
fn stack_floor() -> Option<usize> {
    let here = std::hint::black_box(0u8);
    let sp = std::ptr::addr_of!(here) as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let (a, rest) = l.split_once('-')?;
        let b = rest.split_whitespace().next()?;
        let (a, b) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        let perms = rest.split_whitespace().nth(1)?;
        (a <= sp && sp < b && perms.starts_with("rw")).then_some(a)
    })
}

#[cfg(target_arch = "x86_64")]
mod arch {
    /// Which vector registers the CPU has: 0 = XMM0-15, 1 = YMM0-15,
    /// 2 = ZMM0-31.
    pub fn vector_level() -> usize {
        if std::arch::is_x86_feature_detected!("avx512f") {
            2
        } else if std::arch::is_x86_feature_detected!("avx") {
            1
        } else {
            0
        }
    }

    /// Zeros every byte from `floor` up to the stack pointer at entry (the
    /// return address and everything above it are untouched), then the
    /// vector registers up to `level` (see [`vector_level`]). Naked: no
    /// frame of its own, so nothing it needs lies in the range it wipes.
    ///
    /// # Safety
    /// `[floor, sp)` must be the calling thread's own stack; everything
    /// below the stack pointer is dead at a call (the caller is not a leaf,
    /// so it keeps nothing in a red zone). `level` must not exceed what
    /// [`vector_level`] reports.
    #[unsafe(naked)]
    pub unsafe extern "sysv64" fn zero_below_sp(floor: usize, level: usize) {
        core::arch::naked_asm!(
            "mov rcx, rsp",
            "sub rcx, rdi",
            "jbe 2f",
            "xor eax, eax",
            "cld",
            "rep stosb",
            "2:",
            "mov rdi, rsi",
            "jmp {clear}",
            clear = sym clear_vector_registers_raw,
        )
    }

    /// [`clear_vector_registers`] for the naked [`zero_below_sp`], which
    /// tail-jumps here with `level` in `rdi`.
    #[unsafe(naked)]
    unsafe extern "sysv64" fn clear_vector_registers_raw(level: usize) {
        core::arch::naked_asm!(
            "pxor xmm0, xmm0",
            "pxor xmm1, xmm1",
            "pxor xmm2, xmm2",
            "pxor xmm3, xmm3",
            "pxor xmm4, xmm4",
            "pxor xmm5, xmm5",
            "pxor xmm6, xmm6",
            "pxor xmm7, xmm7",
            "pxor xmm8, xmm8",
            "pxor xmm9, xmm9",
            "pxor xmm10, xmm10",
            "pxor xmm11, xmm11",
            "pxor xmm12, xmm12",
            "pxor xmm13, xmm13",
            "pxor xmm14, xmm14",
            "pxor xmm15, xmm15",
            "test rdi, rdi",
            "jz 3f",
            // YMM0-15 and ZMM0-15 whole.
            "vzeroall",
            "cmp rdi, 2",
            "jb 3f",
            "vpxord zmm16, zmm16, zmm16",
            "vpxord zmm17, zmm17, zmm17",
            "vpxord zmm18, zmm18, zmm18",
            "vpxord zmm19, zmm19, zmm19",
            "vpxord zmm20, zmm20, zmm20",
            "vpxord zmm21, zmm21, zmm21",
            "vpxord zmm22, zmm22, zmm22",
            "vpxord zmm23, zmm23, zmm23",
            "vpxord zmm24, zmm24, zmm24",
            "vpxord zmm25, zmm25, zmm25",
            "vpxord zmm26, zmm26, zmm26",
            "vpxord zmm27, zmm27, zmm27",
            "vpxord zmm28, zmm28, zmm28",
            "vpxord zmm29, zmm29, zmm29",
            "vpxord zmm30, zmm30, zmm30",
            "vpxord zmm31, zmm31, zmm31",
            "vzeroupper",
            "3:",
            "ret",
        )
    }

    /// Zeros the vector registers up to `level` (see [`vector_level`]).
    pub fn clear_vector_registers(level: usize) {
        // SAFETY: the function only zeros caller-saved vector registers
        // (the call tells the compiler they are clobbered) and the
        // instructions it runs are the ones `level` says the CPU has.
        unsafe { clear_vector_registers_raw(level.min(vector_level())) }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod arch {
    /// No vector registers are cleared on this architecture.
    pub fn vector_level() -> usize {
        0
    }

    /// Portable stand-in: zeros a fixed area (the stack's extent below the
    /// caller is not used).
    ///
    /// # Safety
    /// None beyond a safe function's; unsafe to match the x86-64 version.
    pub unsafe fn zero_below_sp(_floor: usize, _level: usize) {
        super::wipe_fixed::<{ super::FALLBACK_STACK_BYTES }>();
    }

    /// Nothing to clear here.
    pub fn clear_vector_registers(_level: usize) {}
}
