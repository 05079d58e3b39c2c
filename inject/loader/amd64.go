package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// x86-64 registers.
const (
	rax = iota
	rcx
	rdx
	rbx
	rsp
	rbp
	rsi
	rdi
	r8
	r9
	r10
	r11
	r12
	r13
	r14
	r15
)

var x86Names = []string{"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"}

// Linux x86-64 system call numbers.
const (
	amd64SysRead   = 0
	amd64SysWrite  = 1
	amd64SysClose  = 3
	amd64SysExecve = 59
	amd64SysFchmod = 91
	amd64SysExit   = 231 // exit_group
	amd64SysOpenat = 257
)

// Open flags and values shared by both architectures (asm-generic).
const (
	oWronlyCreatTrunc = 0x1 | 0x40 | 0x200
	oCloexec          = 0x80000
	atFDCWD           = -100
	mode0755          = 0o755
)

// x86 condition codes for Jcc.
const (
	ccE  = 0x4
	ccNE = 0x5
	ccS  = 0x8
	ccL  = 0xc
)

var ccNames = map[byte]string{ccE: "je", ccNE: "jne", ccS: "js", ccL: "jl"}

type x86 struct{ *asm }

func rexByte(w bool, reg, index, base int) byte {
	b := byte(0x40)
	if w {
		b |= 8
	}
	b |= byte(reg>>3&1) << 2
	b |= byte(index>>3&1) << 1
	b |= byte(base >> 3 & 1)
	return b
}

// modrmMem encodes [base+disp] with the reg field, adding the SIB byte
// rsp/r12 need and the disp8 rbp/r13 need.
func modrmMem(reg, base int, disp int32) []byte {
	var out []byte
	mod := byte(0)
	switch {
	case disp == 0 && base&7 != rbp:
	case disp >= -128 && disp < 128:
		mod = 1
	default:
		mod = 2
	}
	out = append(out, mod<<6|byte(reg&7)<<3|byte(base&7))
	if base&7 == rsp {
		out = append(out, 0x24)
	}
	switch mod {
	case 1:
		out = append(out, byte(int8(disp)))
	case 2:
		out = binary.LittleEndian.AppendUint32(out, uint32(disp))
	}
	return out
}

func modrmReg(reg, rm int) byte { return 0xc0 | byte(reg&7)<<3 | byte(rm&7) }

func mem(base int, disp int32) string {
	if disp == 0 {
		return "[" + x86Names[base] + "]"
	}
	return fmt.Sprintf("[%s%+d]", x86Names[base], disp)
}

// load: mov dst, qword [base+disp]
func (a x86) load(dst, base int, disp int32) {
	b := append([]byte{rexByte(true, dst, 0, base), 0x8b}, modrmMem(dst, base, disp)...)
	a.emit(fmt.Sprintf("mov %s, %s", x86Names[dst], mem(base, disp)), b...)
}

// store: mov qword [base+disp], src
func (a x86) store(base int, disp int32, src int) {
	b := append([]byte{rexByte(true, src, 0, base), 0x89}, modrmMem(src, base, disp)...)
	a.emit(fmt.Sprintf("mov %s, %s", mem(base, disp), x86Names[src]), b...)
}

// rr emits a 64-bit register-register instruction "op dst, src" with
// opcode taking reg=src, rm=dst.
func (a x86) rr(name string, op byte, dst, src int) {
	a.emit(fmt.Sprintf("%s %s, %s", name, x86Names[dst], x86Names[src]), rexByte(true, src, 0, dst), op, modrmReg(src, dst))
}

func (a x86) mov(dst, src int)  { a.rr("mov", 0x89, dst, src) }
func (a x86) add(dst, src int)  { a.rr("add", 0x01, dst, src) }
func (a x86) sub(dst, src int)  { a.rr("sub", 0x29, dst, src) }
func (a x86) cmp(dst, src int)  { a.rr("cmp", 0x39, dst, src) }
func (a x86) test(dst, src int) { a.rr("test", 0x85, dst, src) }

// movImm: mov r32, imm32 (zero-extended to 64 bits).
func (a x86) movImm(dst int, imm uint32) {
	b := []byte{}
	if dst >= 8 {
		b = append(b, 0x41)
	}
	b = append(b, 0xb8+byte(dst&7))
	b = binary.LittleEndian.AppendUint32(b, imm)
	name := x86Names[dst]
	if dst < 8 {
		name = "e" + name[1:]
	} else {
		name += "d"
	}
	a.emit(fmt.Sprintf("mov %s, %#x", name, imm), b...)
}

// movSImm: mov r64, simm32 (sign-extended).
func (a x86) movSImm(dst int, imm int32) {
	b := []byte{rexByte(true, 0, 0, dst), 0xc7, modrmReg(0, dst)}
	b = binary.LittleEndian.AppendUint32(b, uint32(imm))
	a.emit(fmt.Sprintf("mov %s, %d", x86Names[dst], imm), b...)
}

// group1 emits add/sub/cmp r64, imm (ext 0, 5, 7).
func (a x86) group1(name string, ext int, dst int, imm int32) {
	if imm >= -128 && imm < 128 {
		a.emit(fmt.Sprintf("%s %s, %d", name, x86Names[dst], imm), rexByte(true, 0, 0, dst), 0x83, modrmReg(ext, dst), byte(int8(imm)))
		return
	}
	b := []byte{rexByte(true, 0, 0, dst), 0x81, modrmReg(ext, dst)}
	a.emit(fmt.Sprintf("%s %s, %#x", name, x86Names[dst], imm), binary.LittleEndian.AppendUint32(b, uint32(imm))...)
}

func (a x86) addImm(dst int, imm int32) { a.group1("add", 0, dst, imm) }
func (a x86) subImm(dst int, imm int32) { a.group1("sub", 5, dst, imm) }
func (a x86) cmpImm(dst int, imm int32) { a.group1("cmp", 7, dst, imm) }

// unary emits a 64-bit F7/FF-group instruction on one register.
func (a x86) unary(name string, op byte, ext, r int) {
	a.emit(name+" "+x86Names[r], rexByte(true, 0, 0, r), op, modrmReg(ext, r))
}

func (a x86) shlImm(dst int, n byte) {
	a.emit(fmt.Sprintf("shl %s, %d", x86Names[dst], n), rexByte(true, 0, 0, dst), 0xc1, modrmReg(4, dst), n)
}

// cmpByte: cmp byte [base+disp], imm8
func (a x86) cmpByte(base int, disp int32, imm byte) {
	var b []byte
	if base >= 8 {
		b = append(b, rexByte(false, 0, 0, base))
	}
	b = append(b, 0x80)
	b = append(b, modrmMem(7, base, disp)...)
	a.emit(fmt.Sprintf("cmp byte %s, %#x", mem(base, disp), imm), append(b, imm)...)
}

// leaRIP: lea dst, [rip+label]
func (a x86) leaRIP(dst int, label string) {
	a.ref(label, rel32(7))
	a.emit(fmt.Sprintf("lea %s, [rip+%s]", x86Names[dst], label), rexByte(true, dst, 0, 0), 0x8d, byte(dst&7)<<3|5, 0, 0, 0, 0)
}

// rel32 patches the 4-byte displacement ending an n-byte instruction.
func rel32(n int) func(code []byte, at, target int) error {
	return func(code []byte, at, target int) error {
		binary.LittleEndian.PutUint32(code[at+n-4:], uint32(int32(target-(at+n))))
		return nil
	}
}

func (a x86) jcc(cc byte, label string) {
	a.ref(label, rel32(6))
	a.emit(ccNames[cc]+" "+label, 0x0f, 0x80+cc, 0, 0, 0, 0)
}

func (a x86) jmp(label string) {
	a.ref(label, rel32(5))
	a.emit("jmp "+label, 0xe9, 0, 0, 0, 0)
}

func (a x86) call(label string) {
	a.ref(label, rel32(5))
	a.emit("call "+label, 0xe8, 0, 0, 0, 0)
}

func (a x86) syscall() { a.emit("syscall", 0x0f, 0x05) }

// failIfNeg: on a negative rax, report msg for the path in [base+disp].
func (a x86) failIfNeg(msg string, base int, disp int32) {
	a.leaRIP(r8, msg)
	a.load(r9, base, disp)
	a.test(rax, rax)
	a.jcc(ccS, "die")
}

// amd64Program is the loader for linux/amd64. Register use:
// r12 argv, r13 envp, r14 OUT's fd, r15 &argv[i], rbx a chunk's fd,
// rbp the copy buffer; die takes the message in r8, the path in r9 and
// the failed system call's result (-errno) in rax.
func amd64Program() (*asm, error) {
	a := x86{newAsm(62)} // EM_X86_64
	a.label("_start")
	a.load(rdi, rsp, 0) // argc
	a.mov(r12, rsp)
	a.addImm(r12, 8) // argv
	a.mov(r13, rdi)
	a.shlImm(r13, 3)
	a.add(r13, r12)
	a.addImm(r13, 8) // envp = argv + 8*argc + 8
	a.cmpImm(rdi, 4) // loader OUT CHUNK --
	a.jcc(ccL, "usage")
	a.subImm(rsp, bufSize)
	a.mov(rbp, rsp)

	// OUT = openat(AT_FDCWD, argv[1], O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0755)
	a.movImm(rax, amd64SysOpenat)
	a.movSImm(rdi, atFDCWD)
	a.load(rsi, r12, 8)
	a.movImm(rdx, oWronlyCreatTrunc|oCloexec)
	a.movImm(r10, mode0755)
	a.syscall()
	a.failIfNeg("msg_create", r12, 8)
	a.mov(r14, rax)
	a.mov(r15, r12)
	a.addImm(r15, 16) // &argv[2]

	a.label("next")
	a.load(rsi, r15, 0)
	a.test(rsi, rsi)
	a.jcc(ccE, "usage") // no "--"
	a.cmpByte(rsi, 0, '-')
	a.jcc(ccNE, "open")
	a.cmpByte(rsi, 1, '-')
	a.jcc(ccNE, "open")
	a.cmpByte(rsi, 2, 0)
	a.jcc(ccE, "done")

	a.label("open") // rbx = openat(AT_FDCWD, argv[i], O_RDONLY|O_CLOEXEC)
	a.movImm(rax, amd64SysOpenat)
	a.movSImm(rdi, atFDCWD)
	a.movImm(rdx, oCloexec)
	a.syscall()
	a.failIfNeg("msg_open", r15, 0)
	a.mov(rbx, rax)

	a.label("read") // rax = read(rbx, rbp, bufSize)
	a.movImm(rax, amd64SysRead)
	a.mov(rdi, rbx)
	a.mov(rsi, rbp)
	a.movImm(rdx, bufSize)
	a.syscall()
	a.failIfNeg("msg_read", r15, 0)
	a.jcc(ccE, "eof")
	a.mov(rdx, rax) // bytes left to write
	a.mov(rsi, rbp)

	a.label("write") // the kernel preserves rsi and rdx across syscall
	a.movImm(rax, amd64SysWrite)
	a.mov(rdi, r14)
	a.syscall()
	a.failIfNeg("msg_write", r12, 8)
	a.add(rsi, rax)
	a.sub(rdx, rax)
	a.jcc(ccNE, "write")
	a.jmp("read")

	a.label("eof")
	a.movImm(rax, amd64SysClose)
	a.mov(rdi, rbx)
	a.syscall()
	a.addImm(r15, 8)
	a.jmp("next")

	a.label("done")
	a.mov(rax, r12)
	a.addImm(rax, 16)
	a.cmp(r15, rax)
	a.jcc(ccE, "usage") // no chunk given
	a.movImm(rax, amd64SysFchmod)
	a.mov(rdi, r14)
	a.movImm(rsi, mode0755)
	a.syscall()
	a.failIfNeg("msg_create", r12, 8)
	a.movImm(rax, amd64SysClose)
	a.mov(rdi, r14)
	a.syscall()
	a.failIfNeg("msg_write", r12, 8)
	// execve(OUT, &argv[i] with argv[i] = OUT, envp)
	a.load(rdi, r12, 8)
	a.store(r15, 0, rdi)
	a.movImm(rax, amd64SysExecve)
	a.mov(rsi, r15)
	a.mov(rdx, r13)
	a.syscall()
	a.leaRIP(r8, "msg_exec")
	a.load(r9, r12, 8)
	a.jmp("die")

	a.label("usage")
	a.leaRIP(rdi, "msg_prefix")
	a.call("puts")
	a.leaRIP(rdi, "msg_usage")
	a.call("puts")
	a.movImm(rdi, 2)
	a.jmp("exit")

	a.label("die")
	a.mov(rbx, rax)
	a.unary("neg", 0xf7, 3, rbx) // errno
	a.leaRIP(rdi, "msg_prefix")
	a.call("puts")
	a.mov(rdi, r8)
	a.call("puts")
	a.mov(rdi, r9)
	a.call("puts")
	a.leaRIP(rdi, "msg_errno")
	a.call("puts")
	a.mov(rsi, rbp) // errno in decimal, backwards from rbp+32
	a.addImm(rsi, 32)
	a.emit("mov byte [rsi], 0", 0xc6, 0x06, 0x00)
	a.mov(rax, rbx)
	a.movImm(rcx, 10)
	a.label("digit")
	a.unary("dec", 0xff, 1, rsi)
	a.emit("xor edx, edx", 0x31, 0xd2)
	a.unary("div", 0xf7, 6, rcx)
	a.emit("add dl, '0'", 0x80, 0xc2, '0')
	a.emit("mov [rsi], dl", 0x88, 0x16)
	a.test(rax, rax)
	a.jcc(ccNE, "digit")
	a.mov(rdi, rsi)
	a.call("puts")
	a.leaRIP(rdi, "msg_nl")
	a.call("puts")
	a.movImm(rdi, 1)

	a.label("exit") // exit_group(rdi)
	a.movImm(rax, amd64SysExit)
	a.syscall()

	a.label("puts") // write(2, rdi, strlen(rdi)); clobbers rax rcx rdx rsi rdi r11
	a.mov(rdx, rdi)
	a.label("strlen")
	a.cmpByte(rdx, 0, 0)
	a.jcc(ccE, "strlen_end")
	a.unary("inc", 0xff, 0, rdx)
	a.jmp("strlen")
	a.label("strlen_end")
	a.sub(rdx, rdi)
	a.mov(rsi, rdi)
	a.movImm(rdi, 2)
	a.movImm(rax, amd64SysWrite)
	a.syscall()
	a.emit("ret", 0xc3)

	addMessages(a.asm)
	if err := a.resolve(); err != nil {
		return nil, err
	}
	if len(a.code)+codeOffset > MaxSize {
		return nil, errors.New("loader: amd64 code exceeds budget")
	}
	return a.asm, nil
}

func addMessages(a *asm) {
	a.str("msg_prefix", msgPrefix)
	a.str("msg_usage", msgUsage)
	a.str("msg_create", msgCreate)
	a.str("msg_open", msgOpen)
	a.str("msg_read", msgRead)
	a.str("msg_write", msgWrite)
	a.str("msg_exec", msgExec)
	a.str("msg_errno", msgErrno)
	a.str("msg_nl", msgNL)
}
