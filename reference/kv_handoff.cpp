#include "reference/kv_handoff.h"

#include <map>

#include "reference/error.h"

namespace gemma4 {
namespace {

class LocalKvHandoff : public KvHandoff {
 public:
  void store(int, const std::string& key, const SharedKv& kv) override { store_[key] = kv; }

  SharedKv inputs_for(int layer, const std::string& key) override {
    auto it = store_.find(key);
    if (it == store_.end()) {
      throw Error("layer " + std::to_string(layer) + " reads shared K/V under key '" + key + "' but no layer stored it");
    }
    return it->second;
  }

 private:
  std::map<std::string, SharedKv> store_;
};

}  // namespace

std::unique_ptr<KvHandoff> local_kv_handoff(const Config&) { return std::make_unique<LocalKvHandoff>(); }

}  // namespace gemma4
