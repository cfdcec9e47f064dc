// One GPU's memory as a stacked bar of named parts against the GPU's capacity (a dashed mark):
// the Scale tab's chosen layout. Painted directly, so it stays readable in a short window where
// a chart's axes and margins would leave no room for the bar itself.
#pragma once

#include <QColor>
#include <QString>
#include <QWidget>
#include <cstdint>
#include <vector>

namespace rematlab::ui {

class MemoryBar : public QWidget {
  Q_OBJECT

 public:
  struct Part {
    QString name;
    int64_t bytes = 0;
    QColor color;
  };

  explicit MemoryBar(QWidget* parent = nullptr);

  // Empty `parts`: nothing drawn but the caption asking for a layout.
  void set_parts(std::vector<Part> parts, int64_t capacity_bytes, const QString& title);
  const std::vector<Part>& parts() const { return parts_; }
  int64_t total_bytes() const;
  int64_t capacity_bytes() const { return capacity_; }

  QSize minimumSizeHint() const override;
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::vector<Part> parts_;
  int64_t capacity_ = 0;
  QString title_;
};

}  // namespace rematlab::ui
