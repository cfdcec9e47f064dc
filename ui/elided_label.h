// A one-line label that never widens its window: it is as narrow as its layout makes it, elides
// its text there (at the end, or in the middle for paths) and then carries the whole text in its
// tooltip, so nothing cut off is ever out of reach. The status bar's message and database use it.
#pragma once

#include <QFrame>
#include <QString>

class QLabel;

namespace rematlab::ui {

class ElidedLabel : public QFrame {
  Q_OBJECT

 public:
  explicit ElidedLabel(const QString& text = {}, Qt::TextElideMode mode = Qt::ElideRight,
                       QWidget* parent = nullptr);

  void setText(const QString& text);
  void setAlignment(Qt::Alignment alignment);
  QString text() const { return text_; }
  // Said in the tooltip under the whole text (what the label is), elided or not.
  void set_description(const QString& description);
  // Whether the text is cut where it is shown now.
  bool elided() const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void update_tooltip();

  QString text_;
  QString description_;
  Qt::TextElideMode mode_;
  Qt::Alignment alignment_ = Qt::AlignLeft | Qt::AlignVCenter;
};

// A word-wrapped label kept to at most `lines` lines, so a long message cannot push the charts
// under it off a small screen; set_capped_text() also puts the whole text in its tooltip.
void cap_lines(QLabel* label, int lines);
void set_capped_text(QLabel* label, const QString& text);

// Qt shows a tooltip whose first line looks like a tag as rich text, so a name, a reason or a
// setting from a record ("<img …>") would be rendered, not shown. This gives such a text as rich
// text whose every character is escaped (it wraps, as rich tooltips do); any other stays the
// plain text it is.
QString plain_tooltip(const QString& text);

}  // namespace rematlab::ui
