//! Files on the host through Arm semihosting (QEMU's
//! `-semihosting-config enable=on,target=native`; relative paths are taken
//! from QEMU's working directory).

use cortex_m_semihosting::{nr, syscall};

/// A host file.
#[derive(Clone, Copy)]
pub struct File(usize);

impl File {
    /// Opens `path` (NUL-terminated) for reading, binary.
    pub fn open_read(path: &[u8]) -> Result<File, ()> {
        open(path, nr::open::R_BINARY)
    }

    /// Creates or truncates `path` (NUL-terminated) for writing, binary.
    pub fn create(path: &[u8]) -> Result<File, ()> {
        open(path, nr::open::W_TRUNC_BINARY)
    }

    /// Fills `buf` whole; `Err` at the end of the file or on an error.
    pub fn read_exact(self, mut buf: &mut [u8]) -> Result<(), ()> {
        while !buf.is_empty() {
            // SAFETY: SYS_READ writes at most `buf.len()` bytes into `buf`.
            let left = unsafe { syscall!(READ, self.0, buf.as_mut_ptr(), buf.len()) };
            if left >= buf.len() {
                return Err(());
            }
            let done = buf.len() - left;
            buf = &mut buf[done..];
        }
        Ok(())
    }

    /// Writes `buf` whole.
    pub fn write_all(self, mut buf: &[u8]) -> Result<(), ()> {
        while !buf.is_empty() {
            // SAFETY: SYS_WRITE reads `buf.len()` bytes from `buf`.
            let left = unsafe { syscall!(WRITE, self.0, buf.as_ptr(), buf.len()) };
            if left >= buf.len() {
                return Err(());
            }
            buf = &buf[buf.len() - left..];
        }
        Ok(())
    }

    /// Closes the file.
    pub fn close(self) -> Result<(), ()> {
        // SAFETY: SYS_CLOSE takes the handle only.
        match unsafe { syscall!(CLOSE, self.0) } {
            0 => Ok(()),
            _ => Err(()),
        }
    }
}

fn open(path: &[u8], mode: usize) -> Result<File, ()> {
    if path.last() != Some(&0) {
        return Err(());
    }
    // SAFETY: SYS_OPEN reads the NUL-terminated name.
    let fd = unsafe { syscall!(OPEN, path.as_ptr(), mode, path.len() - 1) } as isize;
    if fd < 0 {
        Err(())
    } else {
        Ok(File(fd as usize))
    }
}

/// A buffered writer of the results file.
pub struct Out {
    file: Option<File>,
    buf: [u8; 16 * 1024],
    len: usize,
    /// A write failed.
    pub failed: bool,
}

impl Out {
    /// A writer with no file yet.
    pub const fn new() -> Self {
        Out {
            file: None,
            buf: [0; 16 * 1024],
            len: 0,
            failed: false,
        }
    }

    /// Writes to `file` from now on.
    pub fn attach(&mut self, file: File) {
        self.file = Some(file);
    }

    /// Appends bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        if self.len + b.len() > self.buf.len() {
            self.flush();
        }
        if b.len() > self.buf.len() {
            self.write_through(b);
            return;
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    /// Appends a byte.
    pub fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    /// Appends a u16, little-endian.
    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }

    /// Appends a u32, little-endian.
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    /// Appends a u64, little-endian.
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    fn write_through(&mut self, b: &[u8]) {
        match self.file {
            Some(f) if f.write_all(b).is_ok() => {}
            _ => self.failed = true,
        }
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) {
        let n = self.len;
        self.len = 0;
        if n > 0 {
            let ok = matches!(self.file, Some(f) if f.write_all(&self.buf[..n]).is_ok());
            self.failed |= !ok;
        }
    }
}
