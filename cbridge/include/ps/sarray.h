/*
 * ps::SArray<V>: a shared array. Copies share the memory (reference
 * counted), so passing an SArray around costs no data copy; the memory is
 * released with its deleter when the last copy goes away. An SArray<V> can
 * be viewed as an SArray<W> of the same bytes, and segment() gives a view of
 * a sub-range that shares ownership.
 *
 * The BytePS fork's device fields (src/dst device type and id) are carried
 * along by copies and views; only CPU memory is supported by this library.
 */
#ifndef PS_SARRAY_H_
#define PS_SARRAY_H_

#include <string.h>

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ps/internal/utils.h"
#include "ps/range.h"

namespace ps {

/* Where an array's memory lives (BytePS fork). */
enum DeviceType { UNK = 0, CPU = 1, GPU = 2 };

static const char* const DeviceTypeName[] = {"UNK", "CPU", "GPU"};

template <typename V>
class SArray {
 public:
  SArray() {}
  ~SArray() {}

  /* n elements, each set to val. */
  explicit SArray(size_t size, V val = 0) { resize(size, val); }

  /* A view of arr's bytes as V elements (no copy); arr's byte size must be
   * a multiple of sizeof(V). */
  template <typename W>
  explicit SArray(const SArray<W>& arr) {
    *this = arr;
  }

  /* See the converting constructor. */
  template <typename W>
  void operator=(const SArray<W>& arr) {
    size_t bytes = arr.size() * sizeof(W);
    size_ = bytes / sizeof(V);
    CHECK_EQ(size_ * sizeof(V), bytes) << "cannot view " << bytes
                                       << " bytes as elements of size "
                                       << sizeof(V);
    capacity_ = arr.capacity() * sizeof(W) / sizeof(V);
    ptr_ = std::shared_ptr<V>(arr.ptr(), reinterpret_cast<V*>(arr.data()));
    src_device_type_ = arr.src_device_type_;
    src_device_id_ = arr.src_device_id_;
    dst_device_type_ = arr.dst_device_type_;
    dst_device_id_ = arr.dst_device_id_;
  }

  /* Wraps size elements at data without copying. With deletable, the
   * memory is released with delete[] when the last copy goes away;
   * otherwise the caller keeps ownership and must keep it alive. */
  SArray(V* data, size_t size, bool deletable = false) {
    if (deletable) {
      reset(data, size, [](V* p) { delete[] p; });
    } else {
      reset(data, size, [](V*) {});
    }
  }

  /* Same, with the memory's device placement (BytePS fork). */
  SArray(V* data, size_t size, DeviceType src_device_type, int src_device_id,
         DeviceType dst_device_type, int dst_device_id,
         bool deletable = false) {
    if (deletable) {
      CHECK(src_device_type == CPU) << "only CPU memory can be deletable";
      reset(data, size, [](V* p) { delete[] p; }, src_device_type,
            src_device_id, dst_device_type, dst_device_id);
    } else {
      reset(data, size, [](V*) {}, src_device_type, src_device_id,
            dst_device_type, dst_device_id);
    }
  }

  /* Copies vec. */
  explicit SArray(const std::vector<V>& vec) {
    CopyFrom(vec.data(), vec.size());
  }

  /* Shares vec's storage (no copy); vec must not be resized meanwhile. */
  explicit SArray(const std::shared_ptr<std::vector<V>>& vec) {
    ptr_ = std::shared_ptr<V>(vec, vec->data());
    size_ = vec->size();
    capacity_ = size_;
  }

  /* Copies list, converting each element to V. */
  template <typename W>
  SArray(const std::initializer_list<W>& list) {
    CopyFrom(list.begin(), list.end());
  }

  template <typename W>
  void operator=(const std::initializer_list<W>& list) {
    CopyFrom(list.begin(), list.end());
  }

  /* Replaces the contents with a copy of size elements at data. */
  void CopyFrom(const V* data, size_t size) {
    resize(size);
    if (size > 0) memcpy(this->data(), data, size * sizeof(V));
  }

  void CopyFrom(const SArray<V>& other) {
    if (this == &other) return;
    CopyFrom(other.data(), other.size());
  }

  /* Replaces the contents with a copy of [first, last), in new memory. */
  template <typename ForwardIt>
  void CopyFrom(const ForwardIt& first, const ForwardIt& last) {
    size_t n = static_cast<size_t>(std::distance(first, last));
    V* p = new V[n];
    std::copy(first, last, p);
    reset(p, n, [](V* q) { delete[] q; });
  }

  /* Takes size elements at data, released by del(data) when the last copy
   * goes away. */
  template <typename Deleter>
  void reset(V* data, size_t size, Deleter del,
             DeviceType src_device_type = CPU, int src_device_id = 0,
             DeviceType dst_device_type = CPU, int dst_device_id = 0) {
    size_ = size;
    capacity_ = size;
    ptr_.reset(data, del);
    src_device_type_ = src_device_type;
    src_device_id_ = src_device_id;
    dst_device_type_ = dst_device_type;
    dst_device_id_ = dst_device_id;
  }

  /* Sets the size to n. Growing beyond the capacity moves the contents to
   * new memory (other copies keep the old memory); new elements are val. */
  void resize(size_t size, V val = 0) {
    size_t old = size_;
    if (size > capacity_) {
      // A little slack, so that a few push_backs after a resize do not
      // each reallocate.
      size_t cap = size + 5;
      V* p = new V[cap];
      if (old > 0) memcpy(p, data(), old * sizeof(V));
      reset(p, size, [](V* q) { delete[] q; }, src_device_type_,
            src_device_id_, dst_device_type_, dst_device_id_);
      capacity_ = cap;
    }
    size_ = size;
    if (size > old) std::fill(data() + old, data() + size, val);
  }

  /* Ensures room for size elements without changing the size. */
  void reserve(size_t size) {
    if (size <= capacity_) return;
    size_t old = size_;
    resize(size);
    size_ = old;
  }

  /* Drops the reference to the memory. */
  void clear() { reset(nullptr, 0, [](V*) {}); }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

  V* begin() { return data(); }
  const V* begin() const { return data(); }
  V* end() { return data() + size_; }
  const V* end() const { return data() + size_; }

  V* data() const { return ptr_.get(); }

  std::shared_ptr<V>& ptr() { return ptr_; }
  const std::shared_ptr<V>& ptr() const { return ptr_; }

  V back() const {
    CHECK(!empty());
    return data()[size_ - 1];
  }
  V front() const {
    CHECK(!empty());
    return data()[0];
  }
  V& operator[](size_t i) { return data()[i]; }
  const V& operator[](size_t i) const { return data()[i]; }

  void push_back(const V& val) {
    if (size_ == capacity_) reserve(size_ * 2 + 5);
    data()[size_++] = val;
  }

  void pop_back() {
    if (size_ > 0) --size_;
  }

  /* Appends a copy of arr. */
  void append(const SArray<V>& arr) {
    if (arr.empty()) return;
    size_t old = size_;
    resize(size_ + arr.size());
    memcpy(data() + old, arr.data(), arr.size() * sizeof(V));
  }

  /* A view of elements [begin, end) sharing this array's memory. */
  SArray<V> segment(size_t begin, size_t end) const {
    CHECK_GE(end, begin);
    CHECK_LE(end, size());
    SArray<V> seg;
    seg.ptr_ = std::shared_ptr<V>(ptr_, data() + begin);
    seg.size_ = end - begin;
    seg.capacity_ = end - begin;
    seg.src_device_type_ = src_device_type_;
    seg.src_device_id_ = src_device_id_;
    seg.dst_device_type_ = dst_device_type_;
    seg.dst_device_id_ = dst_device_id_;
    return seg;
  }

  /* Size and placement, for logs (BytePS fork). */
  std::string DebugString() const {
    std::stringstream ss;
    ss << "[size=" << size_ << ", capacity=" << capacity_ << ", "
       << DeviceTypeName[src_device_type_] << '[' << src_device_id_
       << "]->" << DeviceTypeName[dst_device_type_] << '[' << dst_device_id_
       << "]]";
    return ss.str();
  }

  // Device placement (BytePS fork); public as there.
  DeviceType src_device_type_ = CPU;
  int src_device_id_ = 0;
  DeviceType dst_device_type_ = CPU;
  int dst_device_id_ = 0;

 private:
  size_t size_ = 0;
  size_t capacity_ = 0;
  std::shared_ptr<V> ptr_;
};

/* Positions [lb, ub) of the elements of the sorted arr within
 * [lower, upper). */
template <typename V>
Range FindRange(const SArray<V>& arr, V lower, V upper) {
  if (upper <= lower) return Range(0, 0);
  const V* lb = std::lower_bound(arr.begin(), arr.end(), lower);
  const V* ub = std::lower_bound(arr.begin(), arr.end(), upper);
  return Range(lb - arr.begin(), ub - arr.begin());
}

/* "[n]: a b c ... x y z" showing at most m elements at each end. */
template <typename V>
inline std::string DebugStr(const V* data, int n, int m = 5) {
  std::stringstream ss;
  ss << '[' << n << "]: ";
  if (n < 2 * m) {
    for (int i = 0; i < n; ++i) ss << data[i] << ' ';
  } else {
    for (int i = 0; i < m; ++i) ss << data[i] << ' ';
    ss << "... ";
    for (int i = n - m; i < n; ++i) ss << data[i] << ' ';
  }
  return ss.str();
}

template <typename V>
std::ostream& operator<<(std::ostream& os, const SArray<V>& obj) {
  os << DebugStr(obj.data(), static_cast<int>(obj.size()));
  return os;
}

}  // namespace ps
#endif  // PS_SARRAY_H_
