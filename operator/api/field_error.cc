// Formatting of field errors; see field_error.h.
#include "operator/api/field_error.h"

namespace orrery::api {

std::string FormatFieldError(const FieldError& error) {
  std::string out = error.path.empty() ? std::string("<document>") : error.path;
  out += ": ";
  out += error.message;
  if (!error.fix.empty()) {
    out += " (fix: ";
    out += error.fix;
    out += ")";
  }
  return out;
}

Status FieldErrorsToStatus(const std::vector<FieldError>& errors, const std::string& what) {
  if (errors.empty()) return OkStatus();
  std::string message =
      what + ": " + std::to_string(errors.size()) + (errors.size() == 1 ? " error" : " errors");
  for (const FieldError& e : errors) {
    message += "\n  ";
    message += FormatFieldError(e);
  }
  return InvalidArgumentError(message);
}

std::string ChildPath(const std::string& parent, const std::string& field) {
  return parent.empty() ? field : parent + "." + field;
}

std::string IndexPath(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string KeyPath(const std::string& parent, const std::string& key) {
  return parent + "[" + key + "]";
}

}  // namespace orrery::api
