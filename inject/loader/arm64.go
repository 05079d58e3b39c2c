package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Linux arm64 (asm-generic) system call numbers.
const (
	arm64SysFchmod = 52
	arm64SysOpenat = 56
	arm64SysClose  = 57
	arm64SysRead   = 63
	arm64SysWrite  = 64
	arm64SysExit   = 94 // exit_group
	arm64SysExecve = 221
)

// A64 condition codes for B.cond.
const (
	condEQ = 0x0
	condNE = 0x1
	condLT = 0xb
)

var condNames = map[uint32]string{condEQ: "eq", condNE: "ne", condLT: "lt"}

const sp = 31 // register 31 is SP in address and ADD/SUB-immediate operands, XZR elsewhere

type a64 struct{ *asm }

func xn(r int) string {
	if r == sp {
		return "sp"
	}
	return fmt.Sprintf("x%d", r)
}

func (a a64) word(text string, w uint32) { a.emit(text, binary.LittleEndian.AppendUint32(nil, w)...) }

// ldr: ldr xt, [xn, #imm] (imm a multiple of 8)
func (a a64) ldr(t, n int, imm uint32) {
	a.word(fmt.Sprintf("ldr %s, [%s, #%d]", xn(t), xn(n), imm), 0xf9400000|imm/8<<10|uint32(n)<<5|uint32(t))
}

// str: str xt, [xn, #imm]
func (a a64) str(t, n int, imm uint32) {
	a.word(fmt.Sprintf("str %s, [%s, #%d]", xn(t), xn(n), imm), 0xf9000000|imm/8<<10|uint32(n)<<5|uint32(t))
}

// ldrb: ldrb wt, [xn, #imm]
func (a a64) ldrb(t, n int, imm uint32) {
	a.word(fmt.Sprintf("ldrb w%d, [%s, #%d]", t, xn(n), imm), 0x39400000|imm<<10|uint32(n)<<5|uint32(t))
}

// strb: strb wt, [xn] (t = 31 stores wzr)
func (a a64) strb(t, n int) {
	name := fmt.Sprintf("w%d", t)
	if t == 31 {
		name = "wzr"
	}
	a.word(fmt.Sprintf("strb %s, [%s]", name, xn(n)), 0x39000000|uint32(n)<<5|uint32(t))
}

// addImm / subImm: add|sub xd, xn, #imm (imm < 4096)
func (a a64) addImm(d, n int, imm uint32) {
	a.word(fmt.Sprintf("add %s, %s, #%d", xn(d), xn(n), imm), 0x91000000|imm<<10|uint32(n)<<5|uint32(d))
}

func (a a64) subImm(d, n int, imm uint32) {
	a.word(fmt.Sprintf("sub %s, %s, #%d", xn(d), xn(n), imm), 0xd1000000|imm<<10|uint32(n)<<5|uint32(d))
}

// movReg: mov xd, xm (orr xd, xzr, xm)
func (a a64) movReg(d, m int) {
	a.word(fmt.Sprintf("mov x%d, x%d", d, m), 0xaa0003e0|uint32(m)<<16|uint32(d))
}

// movz: movz xd, #imm16, lsl #shift
func (a a64) movz(d int, imm uint32, shift uint32) {
	text := fmt.Sprintf("movz x%d, #%#x", d, imm)
	if shift > 0 {
		text += fmt.Sprintf(", lsl #%d", shift)
	}
	a.word(text, 0xd2800000|shift/16<<21|imm<<5|uint32(d))
}

// movk: movk xd, #imm16, lsl #shift
func (a a64) movk(d int, imm uint32, shift uint32) {
	a.word(fmt.Sprintf("movk x%d, #%#x, lsl #%d", d, imm, shift), 0xf2800000|shift/16<<21|imm<<5|uint32(d))
}

// movn: movn xd, #imm16 (xd = ^imm)
func (a a64) movn(d int, imm uint32) {
	a.word(fmt.Sprintf("movn x%d, #%d // %d", d, imm, ^int64(imm)), 0x92800000|imm<<5|uint32(d))
}

// cmpImm: cmp xn, #imm (subs xzr, xn, #imm)
func (a a64) cmpImm(n int, imm uint32) {
	a.word(fmt.Sprintf("cmp x%d, #%d", n, imm), 0xf100001f|imm<<10|uint32(n)<<5)
}

// cmpWImm: cmp wn, #imm
func (a a64) cmpWImm(n int, imm uint32) {
	a.word(fmt.Sprintf("cmp w%d, #%#x", n, imm), 0x7100001f|imm<<10|uint32(n)<<5)
}

// cmpReg: cmp xn, xm
func (a a64) cmpReg(n, m int) {
	a.word(fmt.Sprintf("cmp x%d, x%d", n, m), 0xeb00001f|uint32(m)<<16|uint32(n)<<5)
}

// branch patches: imm19 at bit 5 (b.cond, cbz, cbnz), imm26 (b, bl),
// imm21 split (adr).
func imm19(code []byte, at, target int) error {
	off := (target - at) / 4
	if off < -(1<<18) || off >= 1<<18 {
		return errors.New("out of range")
	}
	w := binary.LittleEndian.Uint32(code[at:])
	binary.LittleEndian.PutUint32(code[at:], w|uint32(off)&0x7ffff<<5)
	return nil
}

func imm26(code []byte, at, target int) error {
	off := (target - at) / 4
	w := binary.LittleEndian.Uint32(code[at:])
	binary.LittleEndian.PutUint32(code[at:], w|uint32(off)&0x3ffffff)
	return nil
}

func imm21(code []byte, at, target int) error {
	off := uint32(target - at)
	w := binary.LittleEndian.Uint32(code[at:])
	binary.LittleEndian.PutUint32(code[at:], w|(off&3)<<29|(off>>2&0x7ffff)<<5)
	return nil
}

func (a a64) bcond(cond uint32, label string) {
	a.ref(label, imm19)
	a.word("b."+condNames[cond]+" "+label, 0x54000000|cond)
}

func (a a64) cbz(t int, label string) {
	a.ref(label, imm19)
	a.word(fmt.Sprintf("cbz x%d, %s", t, label), 0xb4000000|uint32(t))
}

func (a a64) cbzW(t int, label string) {
	a.ref(label, imm19)
	a.word(fmt.Sprintf("cbz w%d, %s", t, label), 0x34000000|uint32(t))
}

func (a a64) cbnz(t int, label string) {
	a.ref(label, imm19)
	a.word(fmt.Sprintf("cbnz x%d, %s", t, label), 0xb5000000|uint32(t))
}

func (a a64) b(label string) {
	a.ref(label, imm26)
	a.word("b "+label, 0x14000000)
}

func (a a64) bl(label string) {
	a.ref(label, imm26)
	a.word("bl "+label, 0x94000000)
}

func (a a64) adr(d int, label string) {
	a.ref(label, imm21)
	a.word(fmt.Sprintf("adr x%d, %s", d, label), 0x10000000|uint32(d))
}

func (a a64) svc(nr uint32) {
	a.movz(8, nr, 0)
	a.word("svc #0", 0xd4000001)
}

// failIfNeg: on a negative x0, report msg for the path in [base, #disp].
func (a a64) failIfNeg(msg string, base int, disp uint32) {
	a.adr(10, msg)
	a.ldr(11, base, disp)
	a.cmpImm(0, 0)
	a.bcond(condLT, "die")
}

// arm64Program is the loader for linux/arm64. Register use: x19 argv,
// x20 envp, x21 OUT's fd, x22 &argv[i], x23 a chunk's fd, x24 the copy
// buffer; die takes the message in x10, the path in x11 and the failed
// system call's result (-errno) in x0.
func arm64Program() (*asm, error) {
	a := a64{newAsm(183)} // EM_AARCH64
	a.label("_start")
	a.ldr(0, sp, 0)     // argc
	a.addImm(19, sp, 8) // argv
	a.word("add x20, x19, x0, lsl #3", 0x8b000000|0<<16|3<<10|19<<5|20)
	a.addImm(20, 20, 8) // envp = argv + 8*argc + 8
	a.cmpImm(0, 4)      // loader OUT CHUNK --
	a.bcond(condLT, "usage")
	a.word("sub sp, sp, #0x10, lsl #12", 0xd1400000|0x10<<10|sp<<5|sp) // bufSize
	a.addImm(24, sp, 0)

	// OUT = openat(AT_FDCWD, argv[1], O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0755)
	a.movn(0, -atFDCWD-1)
	a.ldr(1, 19, 8)
	a.movz(2, oWronlyCreatTrunc, 0)
	a.movk(2, oCloexec>>16, 16)
	a.movz(3, mode0755, 0)
	a.svc(arm64SysOpenat)
	a.failIfNeg("msg_create", 19, 8)
	a.movReg(21, 0)
	a.addImm(22, 19, 16) // &argv[2]

	a.label("next")
	a.ldr(1, 22, 0)
	a.cbz(1, "usage") // no "--"
	a.ldrb(2, 1, 0)
	a.cmpWImm(2, '-')
	a.bcond(condNE, "open")
	a.ldrb(2, 1, 1)
	a.cmpWImm(2, '-')
	a.bcond(condNE, "open")
	a.ldrb(2, 1, 2)
	a.cbzW(2, "done")

	a.label("open") // x23 = openat(AT_FDCWD, argv[i], O_RDONLY|O_CLOEXEC)
	a.movn(0, -atFDCWD-1)
	a.movz(2, oCloexec>>16, 16)
	a.svc(arm64SysOpenat)
	a.failIfNeg("msg_open", 22, 0)
	a.movReg(23, 0)

	a.label("read") // x0 = read(x23, x24, bufSize)
	a.movReg(0, 23)
	a.movReg(1, 24)
	a.movz(2, bufSize>>16, 16)
	a.svc(arm64SysRead)
	a.failIfNeg("msg_read", 22, 0)
	a.cbz(0, "eof")
	a.movReg(2, 0) // bytes left to write
	a.movReg(1, 24)

	a.label("write")
	a.movReg(0, 21)
	a.svc(arm64SysWrite)
	a.failIfNeg("msg_write", 19, 8)
	a.word("add x1, x1, x0", 0x8b000000|0<<16|1<<5|1)
	a.word("subs x2, x2, x0", 0xeb000000|0<<16|2<<5|2)
	a.bcond(condNE, "write")
	a.b("read")

	a.label("eof")
	a.movReg(0, 23)
	a.svc(arm64SysClose)
	a.addImm(22, 22, 8)
	a.b("next")

	a.label("done")
	a.addImm(0, 19, 16)
	a.cmpReg(22, 0)
	a.bcond(condEQ, "usage") // no chunk given
	a.movReg(0, 21)
	a.movz(1, mode0755, 0)
	a.svc(arm64SysFchmod)
	a.failIfNeg("msg_create", 19, 8)
	a.movReg(0, 21)
	a.svc(arm64SysClose)
	a.failIfNeg("msg_write", 19, 8)
	// execve(OUT, &argv[i] with argv[i] = OUT, envp)
	a.ldr(0, 19, 8)
	a.str(0, 22, 0)
	a.movReg(1, 22)
	a.movReg(2, 20)
	a.svc(arm64SysExecve)
	a.adr(10, "msg_exec")
	a.ldr(11, 19, 8)
	a.b("die")

	a.label("usage")
	a.adr(0, "msg_prefix")
	a.bl("puts")
	a.adr(0, "msg_usage")
	a.bl("puts")
	a.movz(0, 2, 0)
	a.b("exit")

	a.label("die")
	a.word("neg x25, x0", 0xcb0003e0|0<<16|25) // errno
	a.adr(0, "msg_prefix")
	a.bl("puts")
	a.movReg(0, 10)
	a.bl("puts")
	a.movReg(0, 11)
	a.bl("puts")
	a.adr(0, "msg_errno")
	a.bl("puts")
	a.addImm(1, 24, 32) // errno in decimal, backwards from x24+32
	a.strb(31, 1)
	a.movz(3, 10, 0)
	a.label("digit")
	a.subImm(1, 1, 1)
	a.word("udiv x4, x25, x3", 0x9ac00800|3<<16|25<<5|4)
	a.word("msub x5, x4, x3, x25", 0x9b008000|3<<16|25<<10|4<<5|5) // x25 - x4*x3
	a.addImm(5, 5, '0')
	a.strb(5, 1)
	a.movReg(25, 4)
	a.cbnz(25, "digit")
	a.movReg(0, 1)
	a.bl("puts")
	a.adr(0, "msg_nl")
	a.bl("puts")
	a.movz(0, 1, 0)

	a.label("exit") // exit_group(x0)
	a.svc(arm64SysExit)

	a.label("puts") // write(2, x0, strlen(x0)); clobbers x0-x3, x8
	a.movReg(1, 0)
	a.movReg(2, 0)
	a.label("strlen")
	a.ldrb(3, 2, 0)
	a.cbzW(3, "strlen_end")
	a.addImm(2, 2, 1)
	a.b("strlen")
	a.label("strlen_end")
	a.word("sub x2, x2, x1", 0xcb000000|1<<16|2<<5|2)
	a.movz(0, 2, 0)
	a.svc(arm64SysWrite)
	a.word("ret", 0xd65f03c0)

	addMessages(a.asm)
	if err := a.resolve(); err != nil {
		return nil, err
	}
	if len(a.code)+codeOffset > MaxSize {
		return nil, errors.New("loader: arm64 code exceeds budget")
	}
	return a.asm, nil
}
