/*
 * ps::AssignOp: element-wise update operators (a = b, a += b, ...), a
 * utility of ps-lite kept for source compatibility.
 */
#ifndef PS_INTERNAL_ASSIGN_OP_H_
#define PS_INTERNAL_ASSIGN_OP_H_

#include "ps/internal/utils.h"

namespace ps {

enum AssignOp {
  ASSIGN,  // lhs = rhs
  PLUS,    // lhs += rhs
  MINUS,   // lhs -= rhs
  TIMES,   // lhs *= rhs
  DIVIDE,  // lhs /= rhs
  AND,     // lhs &= rhs (integers only)
  OR,      // lhs |= rhs (integers only)
  XOR      // lhs ^= rhs (integers only)
};

/* *lhs op= rhs for arithmetic operators; fails for the bitwise ones, which
 * need AssignFuncInt. */
template <typename T>
inline void AssignFunc(const T& rhs, AssignOp op, T* lhs) {
  switch (op) {
    case ASSIGN: *lhs = rhs; break;
    case PLUS: *lhs += rhs; break;
    case MINUS: *lhs -= rhs; break;
    case TIMES: *lhs *= rhs; break;
    case DIVIDE: *lhs /= rhs; break;
    default: LOG(FATAL) << "bitwise AssignOp " << op << ": use AssignFuncInt";
  }
}

/* *lhs op= rhs for integer types, bitwise operators included. */
template <typename T>
inline void AssignFuncInt(const T& rhs, AssignOp op, T* lhs) {
  switch (op) {
    case AND: *lhs &= rhs; break;
    case OR: *lhs |= rhs; break;
    case XOR: *lhs ^= rhs; break;
    default: AssignFunc(rhs, op, lhs);
  }
}

}  // namespace ps
#endif  // PS_INTERNAL_ASSIGN_OP_H_
